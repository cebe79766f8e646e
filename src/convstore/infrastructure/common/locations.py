"""Reading a store's location as text: its URL scheme, its secrets masked, the data directory.

Light on purpose: the registry (:mod:`convstore.infrastructure`) reads a location with these before
any backend is loaded.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")
_QUERY_SECRET = re.compile(r"(?i)(password=)[^&#]*")


def url_scheme(location: str) -> str | None:
    """The scheme of a ``scheme://…`` location, lowercased; ``None`` for a file path."""
    found = _SCHEME.match(location)
    return found.group(1).lower() if found else None


def redact(url: str) -> str:
    """The URL with every secret replaced by ``***``, safe to print and log.

    Masks the password of the user part and the value of any ``password=`` option. Works on
    the raw text, not a parse: a password holding an unencoded ``/``, ``?`` or ``#`` would
    fool a URL parser into showing part of it. Everything between the first ``:`` after
    ``//`` and the last ``@`` is masked, which masks too much rather than too little.
    """
    scheme, separator, rest = url.partition("://")
    if not separator:
        return url
    at = rest.rfind("@")
    if at >= 0 and ":" in rest[:at]:
        rest = f"{rest[: rest.index(':')]}:***{rest[at:]}"
    return f"{scheme}://" + _QUERY_SECRET.sub(r"\1***", rest)


def data_directory() -> Path:
    """convstore's data directory: ``$XDG_DATA_HOME/convstore``, which is
    ``~/.local/share/convstore`` when ``XDG_DATA_HOME`` is unset."""
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "convstore"
