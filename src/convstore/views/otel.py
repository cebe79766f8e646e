"""A conversation as OpenTelemetry GenAI semantic-convention messages (`export --format otel`).

A pure function of the events. The document is one JSON object whose keys are span attribute
names: it is what a ``chat`` span (or a ``gen_ai.client.inference.operation.details`` event)
for the conversation's last model call carries, with the whole recorded history as its
input. So a tracing backend shows the conversation as one inference, and the document grows
linearly with the conversation (one entry per turn, each repeating the history before it,
would grow with its square).

- ``gen_ai.input.messages``: every stored message but the output, in start order, one
  message each (the schema's ``ChatMessage``). System messages stay here with role
  ``system``: convstore records them as part of the history, and the conventions put
  instructions that are part of the history here rather than in
  ``gen_ai.system_instructions`` (so that attribute is not written).
- ``gen_ai.output.messages``: the last stored message, when it is the assistant's, with its
  ``finish_reason``; otherwise empty.
- Structure is kept, unlike replay's prose: tool calls are ``tool_call`` parts with their
  real ids and arguments, results are ``tool_call_response`` parts linked by the same id,
  reasoning is ``reasoning``, an image is a ``blob`` (its base64 inline) or a ``uri``.
- What the conventions have no field for rides in a ``convstore`` object on the message or
  part (the schemas allow extra properties): the message id, its status (``open``,
  ``ended``, ``interrupted`` and the reason), whether a rewind withdrew it (it is shown, as
  in the Markdown transcript, but replay leaves it out), a result's error flag and tool name.
  Compactions are listed under ``convstore.compactions``.
- A call the provider ran itself (web search, code execution, a remote MCP server's tool) is a
  ``server_tool_call`` part, its result a ``server_tool_call_response`` (the conventions' parts
  for tools run on the provider's side), linked by the call's id: the inner object's ``type``
  is the tool's name, or ``mcp`` with the ``server`` for an MCP server's tool. The provider's
  own payload (``provider_data``) is not written: the JSONL export keeps every byte of it.
- A text's annotations (citations) ride verbatim in its part's ``convstore.annotations``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import assert_never

from pydantic import JsonValue

from convstore.domain.blocks import (
    AnyToolResult,
    Block,
    DocumentBlock,
    HostedToolResultBlock,
    HostedToolUseBlock,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from convstore.domain.events import UNKNOWN_TOOL, ConversationStarted, Event
from convstore.projections.messages import RecordedMessage, collect_history
from convstore.projections.prose import reasoning_text

OTEL_SEMCONV_VERSION = "1.41.0"
"""The OpenTelemetry semantic conventions release whose GenAI message schemas the export
follows."""
OTEL_SCHEMA_URL = f"https://opentelemetry.io/schemas/{OTEL_SEMCONV_VERSION}"

_FINISH_REASONS: dict[str, str] = {
    # Recorded stop reasons (Anthropic, Chat Completions, Responses) in the conventions' words.
    "end_turn": "stop",
    "stop": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "completed": "stop",
    "max_tokens": "length",
    "length": "length",
    "model_context_window_exceeded": "length",
    "incomplete": "length",
    "tool_use": "tool_call",
    "tool_calls": "tool_call",
    "function_call": "tool_call",
    "content_filter": "content_filter",
    "refusal": "content_filter",
    "failed": "error",
}


def otel_document(events: Iterable[Event]) -> dict[str, JsonValue]:
    """The conversation as one object of GenAI span attributes (see the module docstring)."""
    started: list[ConversationStarted] = []

    def note_start(stream: Iterable[Event]) -> Iterable[Event]:
        for event in stream:
            if isinstance(event, ConversationStarted):
                started.append(event)
            yield event

    history = collect_history(note_start(events))
    messages = history.messages
    output = messages[-1:] if messages and messages[-1].role == "assistant" else []
    inputs = messages[: len(messages) - len(output)]
    document: dict[str, JsonValue] = {
        "schema_url": OTEL_SCHEMA_URL,
        "gen_ai.operation.name": "chat",
    }
    if started:
        document["gen_ai.conversation.id"] = str(started[0].originator_id)
    for message in output:
        meta = message.meta
        if meta is not None and meta.model is not None:
            document["gen_ai.response.model"] = meta.model
        if meta is not None and meta.provider_message_id is not None:
            document["gen_ai.response.id"] = meta.provider_message_id
        document["gen_ai.response.finish_reasons"] = [finish_reason(message)]
    document["gen_ai.input.messages"] = [_message(message) for message in inputs]
    document["gen_ai.output.messages"] = [
        {**_message(message), "finish_reason": finish_reason(message)} for message in output
    ]
    document["convstore.compactions"] = [
        {"through": str(compaction.through), "summary": compaction.summary}
        for compaction in history.compactions
    ]
    return document


def finish_reason(message: RecordedMessage) -> str:
    """Why the message ended, in the conventions' words: the recorded stop reason when there
    is one (mapped, or kept as recorded when it has no counterpart); else ``tool_call`` or
    ``stop`` for an ended message, by whether it calls a tool, and ``error`` for one that was
    interrupted or never ended (its ``convstore.status`` says which)."""
    recorded = None if message.meta is None else message.meta.stop_reason
    if recorded is not None:
        return _FINISH_REASONS.get(recorded, recorded)
    if message.status != "ended":
        return "error"
    calls = any(isinstance(recorded.block, ToolUseBlock) for recorded in message.blocks)
    return "tool_call" if calls else "stop"


def _message(message: RecordedMessage) -> dict[str, JsonValue]:
    facts: dict[str, JsonValue] = {
        "message_id": str(message.message_id),
        "status": message.status,
        "withdrawn": message.withdrawn,
    }
    if message.interrupt_reason is not None:
        facts["interrupt_reason"] = message.interrupt_reason
    return {
        "role": message.role,
        "parts": [block_part(recorded.block, recorded.tool_name) for recorded in message.blocks],
        "convstore": facts,
    }


def block_part(block: Block, tool_name: str | None = None) -> dict[str, JsonValue]:
    """One block as a message part of the conventions' schemas."""
    match block:
        case TextBlock():
            text: dict[str, JsonValue] = {"type": "text", "content": block.text}
            if block.annotations:
                text["convstore"] = {"annotations": list(block.annotations)}
            return text
        case ReasoningBlock():
            reasoning: dict[str, JsonValue] = {
                "type": "reasoning",
                "content": reasoning_text(block),
            }
            if block.redacted or (not block.text.strip() and block.encrypted_content):
                reasoning["convstore"] = {"redacted": True}
            return reasoning
        case ToolUseBlock():
            return {
                "type": "tool_call",
                "id": block.id,
                "name": block.name,
                "arguments": block.input,
            }
        case ToolResultBlock():
            response = _response(block)
            facts: dict[str, JsonValue] = {"is_error": block.is_error}
            name = tool_name or block.name
            if name is not None:
                facts["name"] = name
            return {
                "type": "tool_call_response",
                "id": block.tool_use_id,
                "response": response,
                "convstore": facts,
            }
        case HostedToolUseBlock():
            call: dict[str, JsonValue] = {
                "type": _server_tool_type(block),
                "arguments": block.input,
            }
            if block.server is not None:
                call["server"] = block.server
            return {
                "type": "server_tool_call",
                "id": block.id,
                "name": block.name,
                "server_tool_call": call,
            }
        case HostedToolResultBlock():
            name = tool_name or block.name or UNKNOWN_TOOL
            return {
                "type": "server_tool_call_response",
                "id": block.tool_use_id,
                "server_tool_call_response": {"type": name, "response": _response(block)},
                "convstore": {"is_error": block.is_error, "name": name},
            }
        case ImageBlock():
            return _image(block)
        case DocumentBlock():
            return _document(block)
        case _:
            assert_never(block)


def _response(block: AnyToolResult) -> JsonValue:
    """A result's output: its text, or its parts as parts."""
    if isinstance(block.content, str):
        return block.content
    return [block_part(inner) for inner in block.content]


def _server_tool_type(block: HostedToolUseBlock) -> str:
    """The kind of server tool a hosted call is, as the conventions' ``server_tool_call``
    names it: ``mcp`` for a remote MCP server's tool, else the tool's own name
    (``web_search``, ``code_execution``, …)."""
    return "mcp" if block.server is not None else block.name


def _document(document: DocumentBlock) -> dict[str, JsonValue]:
    """A document as a ``blob`` (its bytes), ``uri`` (its address), ``file`` (its file id) or,
    given as text, a ``text`` part; its name rides in ``convstore``."""
    facts: dict[str, JsonValue] = {"document": True}
    if document.name is not None:
        facts["name"] = document.name
    if document.text is not None:
        return {"type": "text", "content": document.text, "convstore": facts}
    media: dict[str, JsonValue] = {"modality": "document"}
    if document.media_type is not None:
        media["mime_type"] = document.media_type
    if document.data is not None:
        return {"type": "blob", **media, "content": document.data, "convstore": facts}
    if document.url is not None:
        return {"type": "uri", **media, "uri": document.url, "convstore": facts}
    assert document.file_id is not None  # a document holds exactly one source
    return {"type": "file", **media, "file_id": document.file_id, "convstore": facts}


def _image(image: ImageBlock) -> dict[str, JsonValue]:
    media: dict[str, JsonValue] = {"modality": "image"}
    if image.media_type is not None:
        media["mime_type"] = image.media_type
    if image.data is not None:
        return {"type": "blob", **media, "content": image.data}
    assert image.url is not None  # an image holds exactly one of data or url
    return {"type": "uri", **media, "uri": image.url}
