"""Size limits on what one block, summary, title or reason may hold, checked before anything
is stored."""

from __future__ import annotations

import os
from dataclasses import dataclass

from convstore.domain.errors import InvalidInput

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """The largest block (as stored JSON) and the largest image (decoded) a store accepts.

    A compaction summary may be as large as a block (UTF-8), a conversation title or an
    interrupt reason, a label value or a message's metadata ``max_note_bytes``. The defaults
    follow the providers: 20 MiB is OpenAI's per-image limit. The environment variables
    ``CONVSTORE_MAX_BLOCK_BYTES``, ``CONVSTORE_MAX_IMAGE_BYTES``, ``CONVSTORE_MAX_DOCUMENT_BYTES``,
    ``CONVSTORE_MAX_INPUT_BYTES`` (the CLI's largest input) and ``CONVSTORE_MAX_NOTE_BYTES``
    override them.
    """

    max_block_bytes: int = 32 * MIB
    max_image_bytes: int = 20 * MIB
    max_input_bytes: int = 64 * MIB
    max_document_bytes: int = 32 * MIB
    """A document's data, decoded (32 MiB is the Messages API's whole-request limit)."""
    max_note_bytes: int = 64 * 1024
    max_label_key_bytes: int = 64
    """A label key: 1 to this many characters from ``A-Z a-z 0-9 . _ - : /``."""
    max_labels: int = 64
    """How many labels one conversation may hold at once (values up to ``max_note_bytes``)."""

    @classmethod
    def from_env(cls) -> Limits:
        """Defaults, overridden by any ``CONVSTORE_MAX_*_BYTES`` variables that are set."""
        values: dict[str, int] = {}
        for field_name in (
            "max_block_bytes",
            "max_image_bytes",
            "max_input_bytes",
            "max_document_bytes",
            "max_note_bytes",
        ):
            variable = f"CONVSTORE_{field_name.upper()}"
            raw = os.environ.get(variable)
            if raw is None:
                continue
            text = raw.strip()
            if not (text.isascii() and text.isdigit()) or int(text) <= 0:
                msg = f"{variable} must be a positive whole number of bytes, not {raw!r}"
                raise InvalidInput(msg)
            values[field_name] = int(text)
        return cls(**values)
