"""Models assembled from values that were checked already, without running a validator.

Two places hold values no validator needs to see again: the writer, building an event from a
block :func:`~convstore.domain.parsing.parse_block` accepted and values its own rules made,
and replay's decoder, rebuilding an event its store wrote
(:mod:`convstore.infrastructure.common.trusted_decode`). Both assemble the model as
``model_construct`` does (the fields in the model's order, defaults filled in, the given
names as the fields set), without its overhead: pydantic's ``model_construct`` is written in
Python and takes longer than validating (~11 µs against ~8 µs for a block event), where this
takes ~2 µs less than validating. The model is equal to the validated one;
``tests/test_read_back.py``, ``tests/test_trusted_decode.py`` and
``tests/test_domain_rules.py`` hold that.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

M = TypeVar("M", bound=BaseModel)

_new = object.__new__
_set = object.__setattr__


class Assembly:
    """How one model class is assembled: its fields' order, defaults and factories."""

    __slots__ = ("cls", "factories", "required", "template")

    def __init__(self, cls: type[BaseModel]) -> None:
        self.cls = cls
        defaults: dict[str, Any] = {}
        self.factories: dict[str, Callable[[], Any]] = {}
        for name, field in cls.model_fields.items():
            if field.default_factory is not None:
                self.factories[name] = field.default_factory  # type: ignore[assignment]
            elif field.default is not PydanticUndefined:
                defaults[name] = field.default
        self.template = {name: defaults.get(name) for name in cls.model_fields}
        """Every field in the model's order: a merged dict keeps the order a validated
        model's ``__dict__`` has."""
        self.required = frozenset(self.template.keys() - defaults.keys() - self.factories.keys())

    def __call__(self, fields: dict[str, Any]) -> BaseModel:
        """The model of ``fields`` (each a field of the model, holding a value of its type;
        the caller makes sure of both)."""
        values = {**self.template, **fields}
        for name, factory in self.factories.items():
            if name not in fields:
                values[name] = factory()
        model = _new(self.cls)
        _set(model, "__dict__", values)
        _set(model, "__pydantic_fields_set__", set(fields))
        _set(model, "__pydantic_extra__", None)
        _set(model, "__pydantic_private__", None)
        return model


@functools.cache
def assembly(cls: type[BaseModel]) -> Assembly:
    """The assembly of ``cls``, made once."""
    return Assembly(cls)


def assembled(cls: type[M], **fields: Any) -> M:
    """A ``cls`` of ``fields``, which were checked already (see the module's notes)."""
    model = assembly(cls)(fields)
    assert isinstance(model, cls)
    return model
