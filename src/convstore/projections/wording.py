"""The fixed words replay adds around recorded prose, with no imports of their own, so a reader
that renders stored replay plans (the command line's quick path) can use them without loading
the domain's models."""

from __future__ import annotations

BLOCK_SEPARATOR = "\n\n"
"""Joins the prose of adjacent blocks within one wire message."""

PART_SEPARATOR = "\n"
"""Joins the text parts inside one tool result."""

NOTHING_RECORDED = "[Nothing was recorded for this message.]"
BLANK_MESSAGE = "[This message's recorded text was blank.]"
SUMMARY_HEAD = "[Summary of the earlier conversation, which it replaces]: "
HISTORY_STARTS = "[The recorded conversation starts here, with the assistant's message.]"
"""The one wire message replay adds that no stored message is: a user turn put before the
first non-system message when that is the assistant's (a history recorded from mid-way, or
whose opening was rewound away). The validators in use refuse a first turn that is not the
user's (Bedrock's Converse, Mistral's chat API, chat templates)."""
NO_RESULT = "[No result was recorded for this call.]"
"""Follows a tool call whose result never landed, once the history has moved past it: a
model told so can say it does not know the outcome; one handed silence may assume one."""

CANNOT_SEE = "this model cannot see images"
"""Why images are not shown to a model that cannot see (completes the marker's sentence)."""


def interruption_marker(reason: str | None) -> str:
    """The line that closes a message that was interrupted."""
    return f"[Interrupted: {reason}]" if reason else "[Interrupted]"


CANNOT_READ = "this model cannot see documents"
"""Why a PDF is not sent to a model that cannot see (it reads a PDF's pages as images)."""

NOT_NATIVE = "it cannot be sent in this shape"
"""Why a document with no native form in the replayed shape is not sent (a file id, a binary
that is not a PDF, a PDF by URL in the OpenAI shape)."""
