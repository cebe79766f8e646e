"""Pydantic AI: record an agent run's messages, and give the history back as prose.

    pip install -e '.[pydantic-ai]'   # in the convstore checkout

:func:`record_messages` records ``result.new_messages()`` as convstore messages;
:func:`message_history` returns the conversation's replay as a ``list[ModelMessage]`` for
``agent.run(..., message_history=...)``: one ``ModelRequest`` or ``ModelResponse`` per stored
message, every block as prose, no tool-call or tool-return parts, so a tool round killed
before its return was recorded cannot break the next run. For asyncio, await
:func:`arecord_messages` and :func:`amessage_history` (on an :class:`~convstore.AsyncStore`
or a ``Store``, through :func:`convstore.store.aio.as_async`); ``record_messages_async`` and
``message_history_async`` are their old names, kept for one release.

:class:`RunRecorder`, a capability given to ``agent.run(..., capabilities=[...])``, records a
run's new messages as the run goes instead: everything up to the model's response before a tool
runs, the rest when the run ends, so a process killed inside a tool leaves the call recorded.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn, get_args
from uuid import UUID

from convstore.ports.extras import missing_extra

try:
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import (
        ERROR_OUTCOMES,
        BinaryContent,
        CachePoint,
        DocumentUrl,
        FilePart,
        ImageUrl,
        ModelMessage,
        ModelRequest,
        ModelRequestPart,
        ModelResponse,
        ModelResponsePart,
        ModelResponseState,
        NativeToolCallPart,
        NativeToolReturnPart,
        RetryFeedbackPart,
        RetryPromptPart,
        SystemPromptPart,
        TextContent,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        UserContent,
        UserPromptPart,
    )
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import RunContext, ToolDefinition
except ImportError:  # pragma: no cover - exercised by a test that hides the package
    _HINT = missing_extra(
        "convstore.integrations.pydantic_ai (Pydantic AI 2.78 or newer)",
        "pydantic-ai",
        "'pydantic-ai-slim>=2.78'",
    )
    raise ImportError(_HINT) from None

from pydantic import TypeAdapter

from convstore.convert.history import HistoryMessage, HistoryStatus
from convstore.convert.parts import arguments_text
from convstore.convert.pydantic_ai import hosted_call, hosted_return, text_block
from convstore.domain.blocks import Block
from convstore.domain.errors import InvalidBlock, InvalidInput
from convstore.domain.events import Role
from convstore.domain.images import ImageMediaType
from convstore.domain.limits import Limits
from convstore.domain.parsing import parse_block
from convstore.engine.plan import JSONDict
from convstore.store import Store
from convstore.store.aio import AsyncStore, as_async

__all__ = [
    "RunRecorder",
    "amessage_history",
    "arecord_messages",
    "convert_messages",
    "history_from_replay",
    "message_history",
    "message_history_async",
    "record_messages",
    "record_messages_async",
]

IMAGE_TYPES: tuple[str, ...] = get_args(ImageMediaType)
"""The image media types convstore stores (PNG, JPEG, GIF, WebP)."""

REDACTED_THINKING_ID = "redacted_thinking"
"""The id Pydantic AI gives a thinking part that holds Anthropic's redacted thinking data."""

OPENAI_PROVIDERS = ("openai", "azure")
"""Providers whose thinking signature is a Responses API reasoning item's encrypted_content."""

JSONBlock = dict[str, Any]

RESPONSE_PART: TypeAdapter[ModelResponsePart] = TypeAdapter(ModelResponsePart)
"""Pydantic AI's own serialiser of a response part: the parts that the history importer
(``convstore.convert.pydantic_ai``) reads are handed to it in the JSON it reads, so each is
converted in one place."""

STATUS_OF_RESPONSE: dict[ModelResponseState, HistoryStatus] = {
    "complete": "ended",
    "suspended": "ended",  # continued by pydantic-ai itself; never left so in a history
    "incomplete": "open",  # still streaming, or stopped before it completed
    "interrupted": "interrupted",  # cut off, or the run stopped before acting on it
}
"""How a response's lifecycle state is recorded: ended, left open, or interrupted."""


# -- recording -------------------------------------------------------------------------------


def convert_messages(
    messages: Sequence[ModelMessage], limits: Limits | None = None
) -> list[HistoryMessage]:
    """Pydantic AI messages as convstore messages (role, checked blocks, status); no I/O.

    A ``ModelRequest`` becomes a system message (its system-prompt parts) and a user message
    (user prompts, tool returns, retries), in the order its parts come; a ``ModelResponse``
    becomes one assistant message, ended, left open (``incomplete``) or interrupted as its
    ``state`` says. A part convstore cannot keep is refused with
    :class:`~convstore.InvalidInput` naming it and the message's position.
    """
    converted: list[HistoryMessage] = []
    for position, message in enumerate(messages):
        try:
            for role, blocks, status in _message(message):
                checked = tuple(parse_block(b, limits) for b in blocks)
                converted.append(HistoryMessage(role, checked, status))
        except InvalidBlock as exc:
            msg = f"message {position} ({message.kind}): {exc}"
            raise InvalidBlock(msg) from None
        except InvalidInput as exc:
            msg = f"message {position} ({message.kind}): {exc}"
            raise InvalidInput(msg) from None
    return converted


def record_messages(
    store: Store, conversation: UUID | str, messages: Sequence[ModelMessage]
) -> list[UUID]:
    """Record Pydantic AI messages (e.g. ``result.new_messages()``); returns the message ids.

    Every part is converted and checked before anything is written, so a part convstore
    cannot keep leaves the conversation untouched; each message is then one atomic write (an
    interrupted response: its blocks, then the interruption).
    """
    if isinstance(store, AsyncStore):
        msg = "record_messages takes a Store; with an AsyncStore, await arecord_messages"
        raise InvalidInput(msg)
    ids: list[UUID] = []
    for message in convert_messages(messages, store.limits):
        ended = message.status == "ended"
        ids.append(
            store.append_message(conversation, message.role, message.blocks, leave_open=not ended)
        )
        if message.status == "interrupted":
            store.interrupt_message(conversation, ids[-1])
    return ids


async def arecord_messages(
    store: Store | AsyncStore, conversation: UUID | str, messages: Sequence[ModelMessage]
) -> list[UUID]:
    """:func:`record_messages` for asyncio, on an :class:`~convstore.AsyncStore` or a
    ``Store`` (see :func:`convstore.store.aio.as_async`).

    Converting (images are decoded and checked) runs on a worker thread, off the loop.
    """
    twin = as_async(store)
    ids: list[UUID] = []
    for message in await asyncio.to_thread(convert_messages, list(messages), twin.limits):
        ended = message.status == "ended"
        ids.append(
            await twin.append_message(
                conversation, message.role, message.blocks, leave_open=not ended
            )
        )
        if message.status == "interrupted":
            await twin.interrupt_message(conversation, ids[-1])
    return ids


record_messages_async = arecord_messages
"""The old name of :func:`arecord_messages`, kept for one release (see CHANGELOG.md)."""


class RunRecorder(AbstractCapability[Any]):
    """A capability that records a run's new messages into ``conversation`` as the run goes:
    before each tool runs, every new message so far (the prompt, the responses, the earlier
    tools' returns, up to the response that called the tool), and the rest when the run ends.
    Give it instead of calling :func:`record_messages` on ``result.new_messages()``:

        agent.run_sync(prompt, message_history=message_history(store, conversation),
                       capabilities=[RunRecorder(store, conversation)])

    A process killed inside a tool so leaves the model's call recorded (the tool's return
    never lands). Each message is recorded once, each an atomic write as with
    :func:`record_messages`; a run that fails keeps what was recorded before it failed.
    """

    def __init__(self, store: Store | AsyncStore, conversation: UUID | str) -> None:
        self.store = store
        self.conversation = conversation
        self._start = 0  # where the run's new messages begin in ctx.messages
        self._recorded = 0  # how many of them are recorded
        self._lock = asyncio.Lock()  # tools of one response may start at once

    async def for_run(self, ctx: RunContext[Any]) -> RunRecorder:
        """A recorder of its own for each run (the counts are the run's)."""
        return RunRecorder(self.store, self.conversation)

    async def before_run(self, ctx: RunContext[Any]) -> None:
        self._start = len(ctx.messages)

    async def before_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
    ) -> dict[str, Any]:
        await self._record(ctx.messages[self._start :])
        return args

    async def after_run(
        self, ctx: RunContext[Any], *, result: AgentRunResult[Any]
    ) -> AgentRunResult[Any]:
        await self._record(result.new_messages())
        return result

    async def _record(self, new: Sequence[ModelMessage]) -> None:
        async with self._lock:
            fresh = list(new[self._recorded :])
            if fresh:
                await arecord_messages(self.store, self.conversation, fresh)
                self._recorded += len(fresh)


def _message(
    message: ModelMessage,
) -> Iterator[tuple[Role, Sequence[Block | JSONBlock], HistoryStatus]]:
    match message:
        case ModelRequest():
            for role, blocks in _request(message.parts):
                yield role, blocks, "ended"
        case ModelResponse():
            parts = [_response_part(index, part) for index, part in enumerate(message.parts)]
            yield "assistant", parts, STATUS_OF_RESPONSE[message.state]
        case _:
            _refuse(f"a message of kind {getattr(message, 'kind', type(message).__name__)!r}")


def _request(parts: Sequence[ModelRequestPart]) -> Iterator[tuple[Role, list[JSONBlock]]]:
    """Runs of parts with the same role, each one message, in order."""
    role: Role | None = None
    blocks: list[JSONBlock] = []
    for index, part in enumerate(parts):
        part_role, part_blocks = _request_part(index, part)
        if not part_blocks:
            continue
        if part_role != role and blocks:
            assert role is not None
            yield role, blocks
            blocks = []
        role = part_role
        blocks.extend(part_blocks)
    if blocks:
        assert role is not None
        yield role, blocks


def _request_part(index: int, part: ModelRequestPart) -> tuple[Role, list[JSONBlock]]:
    match part:
        case SystemPromptPart():
            return "system", [_text(part.content)]
        case UserPromptPart():
            return "user", _user_content(index, part.content)
        case ToolReturnPart():
            return "user", [_tool_return(index, part)]
        case RetryFeedbackPart():
            return "user", [_text(part.model_response())]
        case RetryPromptPart():  # the deprecated form, still accepted as history
            if part.tool_name is None:
                return "user", [_text(part.model_response())]
            result = {
                "type": "tool_result",
                "tool_use_id": part.tool_call_id,
                "name": part.tool_name,
                "content": part.model_response(),
                "is_error": True,
            }
            return "user", [result]
        case _:
            raise _refused_part(index, part)


def _response_part(index: int, part: ModelResponsePart) -> Block | JSONBlock:
    where = f"part {index} ({part.part_kind})"
    match part:
        case TextPart() if part.citations:
            return text_block(_part_json(part), where)
        case TextPart():
            return _text(part.content)
        case NativeToolCallPart():
            return hosted_call(_part_json(part), where)
        case NativeToolReturnPart():
            return hosted_return(_part_json(part), where)
        case ToolCallPart():
            return {
                "type": "tool_use",
                "id": part.tool_call_id,
                "name": part.tool_name,
                "input": _tool_input(part.args),
            }
        case ThinkingPart():
            return _reasoning(part)
        case FilePart():
            return _binary(index, part.content, "a file part")
        case _:
            raise _refused_part(index, part)


def _part_json(part: ModelResponsePart) -> dict[str, Any]:
    dumped: dict[str, Any] = RESPONSE_PART.dump_python(part, mode="json")
    return dumped


def _text(text: str) -> JSONBlock:
    return {"type": "text", "text": text}


def _user_content(index: int, content: str | Sequence[UserContent]) -> list[JSONBlock]:
    if isinstance(content, str):
        return [_text(content)]
    blocks: list[JSONBlock] = []
    for item in content:
        match item:
            case str():
                blocks.append(_text(item))
            case TextContent():  # StructuredContent too: its rendered text is what models see
                blocks.append(_text(item.content))
            case BinaryContent():
                blocks.append(_binary(index, item, "a user prompt"))
            case ImageUrl():
                blocks.append(_image_url(item))
            case DocumentUrl():
                blocks.append(_document_url(item))
            case CachePoint():
                pass  # a caching hint for the provider; it carries no content
            case _:
                kind = getattr(item, "kind", type(item).__name__)
                _refuse(
                    f"part {index} (user-prompt): {kind!r} content cannot be recorded; convstore "
                    "keeps text, images and documents (BinaryContent other than audio or video, "
                    "ImageUrl, DocumentUrl)"
                )
    return blocks


def _binary(index: int, content: BinaryContent, where: str) -> JSONBlock:
    """Bytes as an image, or as a document of any type but audio and video."""
    if content.media_type not in IMAGE_TYPES and not (content.is_audio or content.is_video):
        data = base64.b64encode(content.data).decode("ascii")
        return {"type": "document", "media_type": content.media_type, "data": data}
    return _image(index, content, where)


def _image(index: int, content: BinaryContent, where: str) -> JSONBlock:
    if content.media_type not in IMAGE_TYPES:
        _refuse(
            f"part {index}: {where} holds {content.media_type} data; convstore keeps only "
            f"images of type {', '.join(IMAGE_TYPES)}"
        )
    data = base64.b64encode(content.data).decode("ascii")
    return {"type": "image", "media_type": content.media_type, "data": data}


def _image_url(image: ImageUrl) -> JSONBlock:
    """An image by its address, kept as given and never fetched."""
    block: JSONBlock = {"type": "image", "url": image.url}
    try:
        media_type: str | None = image.media_type
    except ValueError:  # no media type given, and none to infer from the address
        media_type = None
    if media_type in IMAGE_TYPES:
        block["media_type"] = media_type
    return block


def _document_url(document: DocumentUrl) -> JSONBlock:
    """A document by its address (kept as given, never fetched), or a ``data:`` URL's bytes."""
    if document.url.startswith("data:"):
        header, _, data = document.url.partition(",")
        media_type = header.removeprefix("data:").removesuffix(";base64")
        return {"type": "document", "media_type": media_type, "data": data}
    block: JSONBlock = {"type": "document", "url": document.url}
    with contextlib.suppress(ValueError):  # no media type given, and none to infer from it
        block["media_type"] = document.media_type
    return block


def _tool_return(index: int, part: ToolReturnPart) -> JSONBlock:
    text = part.model_response_str(wrap_if_error=False)
    files = part.files
    content: str | list[JSONBlock] = text
    if files:
        content = [_text(text)] if text else []
        for file in files:
            if isinstance(file, BinaryContent):
                content.append(_binary(index, file, "a tool return"))
            elif isinstance(file, ImageUrl):
                content.append(_image_url(file))
            elif isinstance(file, DocumentUrl):
                content.append(_document_url(file))
            else:
                _refuse(
                    f"part {index} (tool-return): {file.kind!r} content cannot be recorded; "
                    "convstore keeps text, images and documents (BinaryContent other than "
                    "audio or video, ImageUrl, DocumentUrl)"
                )
    return {
        "type": "tool_result",
        "tool_use_id": part.tool_call_id,
        "name": part.tool_name,
        "content": content,
        "is_error": part.outcome in ERROR_OUTCOMES,
    }


def _tool_input(args: object) -> dict[str, Any] | str:
    """The call's arguments: an object as is, else the raw text the model emitted, unrepaired."""
    if args is None:
        return {}
    if isinstance(args, Mapping):
        return dict(args)
    if not isinstance(args, str):
        _refuse(f"tool-call arguments of type {type(args).__name__} cannot be recorded")
    return arguments_text(args)


def _reasoning(part: ThinkingPart) -> JSONBlock:
    block: JSONBlock = {"type": "reasoning", "text": part.content}
    if part.id == REDACTED_THINKING_ID:
        # Anthropic's redacted_thinking: its encrypted data is all there is.
        block["redacted"] = True
        block["encrypted_content"] = part.signature
    elif part.signature is not None and part.provider_name in OPENAI_PROVIDERS:
        block["encrypted_content"] = part.signature
    elif part.signature is not None:
        block["signature"] = part.signature
    return block


def _refused_part(index: int, part: ModelRequestPart | ModelResponsePart) -> InvalidInput:
    kind = getattr(part, "part_kind", type(part).__name__)
    return InvalidInput(
        f"part {index}: Pydantic AI {kind!r} parts cannot be recorded; convstore records "
        "system-prompt, user-prompt, tool-return, retry-prompt and retry-feedback parts of a "
        "request, and text, tool-call, builtin-tool-call, builtin-tool-return, thinking and "
        "file parts of a response"
    )


def _refuse(message: str) -> NoReturn:
    raise InvalidInput(message)


# -- history ---------------------------------------------------------------------------------


def message_history(
    store: Store,
    conversation: UUID | str,
    *,
    vision: bool = False,
    full: bool = False,
    keep_tool_results: int | None = None,
) -> list[ModelMessage]:
    """The conversation's replay as Pydantic AI messages, for ``message_history=``.

    One message per stored message, every block as prose (see the replay rules, docs/blocks.md);
    ``vision`` says whether the model can see images, and the compaction options are
    :meth:`~convstore.Store.replay`'s.
    """
    if isinstance(store, AsyncStore):
        msg = "message_history takes a Store; with an AsyncStore, await amessage_history"
        raise InvalidInput(msg)
    request = store.replay(
        conversation, vision=vision, full=full, keep_tool_results=keep_tool_results
    )
    return history_from_replay(request)


async def amessage_history(
    store: Store | AsyncStore,
    conversation: UUID | str,
    *,
    vision: bool = False,
    full: bool = False,
    keep_tool_results: int | None = None,
) -> list[ModelMessage]:
    """:func:`message_history` for asyncio, on an :class:`~convstore.AsyncStore` or a
    ``Store`` (see :func:`convstore.store.aio.as_async`)."""
    request = await as_async(store).replay(
        conversation, vision=vision, full=full, keep_tool_results=keep_tool_results
    )
    return history_from_replay(request)


message_history_async = amessage_history
"""The old name of :func:`amessage_history`, kept for one release (see CHANGELOG.md)."""


def history_from_replay(request: JSONDict) -> list[ModelMessage]:
    """An OpenAI-shaped replay (``{"messages": [...]}``) as Pydantic AI messages."""
    history: list[ModelMessage] = []
    for message in request["messages"]:
        role, content = message["role"], message["content"]
        if role == "system":
            history.append(ModelRequest(parts=[SystemPromptPart(content)]))
        elif role == "user":
            history.append(ModelRequest(parts=[UserPromptPart(_prompt(content))]))
        else:
            history.append(ModelResponse(parts=[TextPart(content)]))
    return history


def _prompt(content: str | list[Mapping[str, Any]]) -> str | list[UserContent]:
    if isinstance(content, str):
        return content
    items: list[UserContent] = []
    for part in content:
        if part["type"] == "text":
            items.append(part["text"])
        elif part["type"] == "file":  # a PDF replay sends natively
            _, _, data = part["file"]["file_data"].partition(",")
            items.append(BinaryContent(data=base64.b64decode(data), media_type="application/pdf"))
        elif not part["image_url"]["url"].startswith("data:"):
            items.append(ImageUrl(url=part["image_url"]["url"]))
        else:
            header, _, data = part["image_url"]["url"].partition(",")
            media_type = header.removeprefix("data:").removesuffix(";base64")
            try:
                raw = base64.b64decode(data, validate=True)
            except binascii.Error as exc:  # pragma: no cover - replay only emits valid base64
                msg = f"replayed image data is not base64: {exc}"
                raise InvalidInput(msg) from None
            items.append(BinaryContent(data=raw, media_type=media_type))
    return items
