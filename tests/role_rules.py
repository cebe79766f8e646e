"""The role-order rules of the validators replay must satisfy beyond the SDK types, as small
pure functions over a replay fragment (``{"messages": [...]}``, plus ``system`` in the
Anthropic shape). Each returns the problems it finds; empty means the rule holds.

Where each rule is written:

- Bedrock: the Converse API answers a conversation that does not open with the user
  ``ValidationException: A conversation must start with a user message`` and one whose roles
  do not alternate ``A conversation must alternate between user and assistant roles``; the
  Messages API on Bedrock (InvokeModel) answers ``messages: first message must use the "user"
  role`` (the service's own errors, quoted in langgenius/dify#12340,
  langchain-ai/langchain-aws#130, anthropics/anthropic-sdk-typescript#622 and
  langchain4j/langchain4j#1864; Converse's request reference:
  https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html). A blank
  text block is refused too ("The text field in the ContentBlock object at
  messages.11.content.0 is blank", continuedev/continue#9767, boto/botocore#3525).
- Mistral: mistral-common's ``MistralRequestValidator``
  (src/mistral_common/protocol/instruct/validator.py, ``_validate_message_list_structure``
  and ``_validate_last_message``): a conversation starts with a user or system message, and
  in serving mode the last message is the user's or a tool's, or the assistant's with
  ``prefix`` set ("Expected last role User or Tool (or Assistant with prefix True) for
  serving"). The hosted API applies the first-message rule whatever the length.
- Chat templates (the Llama 2 / Mistral family on Hugging Face) raise "Conversation roles
  must alternate user/assistant/user/assistant/..." unless, after the system message, the
  first message is the user's and the roles alternate.
- Anthropic's Messages API itself: "Consecutive user or assistant turns in your request will
  be combined into a single turn" (https://docs.anthropic.com/en/api/messages), so it needs no
  alternation; it accepts an assistant first (the Bedrock difference in #622).
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import Any


def _turns(fragment: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The messages that are not system messages, in order."""
    return [m for m in fragment["messages"] if m["role"] != "system"]


def _texts(message: Mapping[str, Any]) -> list[str]:
    content = message["content"]
    if isinstance(content, str):
        return [content]
    return [p["text"] for p in content if p.get("type") == "text"]


def first_turn_problems(fragment: Mapping[str, Any]) -> list[str]:
    """Bedrock's, Mistral's and the chat templates' rule: the first message after the system
    messages is the user's (Mistral also takes a tool's; replay sends no tool role)."""
    turns = _turns(fragment)
    if turns and turns[0]["role"] not in {"user", "tool"}:
        return [f"the first message is the {turns[0]['role']}'s, not the user's"]
    return []


def alternation_problems(fragment: Mapping[str, Any]) -> list[str]:
    """Bedrock Converse's and the chat templates' rule: user and assistant alternate."""
    turns = _turns(fragment)
    return [
        f"messages {i} and {i + 1} are both the {a['role']}'s"
        for i, (a, b) in enumerate(pairwise(turns))
        if a["role"] == b["role"]
    ]


def blank_text_problems(fragment: Mapping[str, Any]) -> list[str]:
    """Bedrock's rule: no message without content, no blank text block."""
    problems = []
    for index, message in enumerate(fragment["messages"]):
        if not message["content"]:
            problems.append(f"message {index} has no content")
        problems += [f"message {index} has blank text" for t in _texts(message) if not t.strip()]
    return problems


def last_turn_problems(fragment: Mapping[str, Any]) -> list[str]:
    """Mistral's serving rule: the last message is the user's or a tool's, or the
    assistant's with ``prefix`` set."""
    turns = _turns(fragment)
    if not turns:
        return []
    last = turns[-1]
    if last["role"] in {"user", "tool"} or (last["role"] == "assistant" and last.get("prefix")):
        return []
    return [f"the last message is the {last['role']}'s"]
