"""LangChain: a ``BaseChatMessageHistory`` kept in a convstore store.

    pip install -e '.[langchain]'   # in the convstore checkout

:class:`ConvstoreChatMessageHistory` records each LangChain message twice in one write: the
message verbatim (``message_to_dict``, a runtime entry, so nothing it carried is lost) and as
convstore blocks (``AIMessage.tool_calls`` as ``tool_use``, a ``ToolMessage`` as
``tool_result``, reasoning, images, documents, server-side tool calls), so ``replay``,
``audit``, ``serve`` and compaction work on the session. ``messages`` gives back the
conversation's replay, one message per stored message with every block as prose: no
``AIMessage`` with ``tool_calls`` and no ``ToolMessage`` ever comes back, so a tool round
killed before its result landed cannot make the next model call fail.

:func:`message_blocks` is the pure mapping from one LangChain message to a role and blocks;
the LangGraph checkpointer (:mod:`convstore.integrations.langgraph`) records messages with it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, cast
from uuid import UUID, uuid5

from convstore.ports.extras import missing_extra

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        message_to_dict,
    )
except ImportError:  # pragma: no cover - exercised by a test that hides the package
    _HINT = missing_extra(
        "convstore.integrations.langchain (langchain-core 1.8 or newer)",
        "langchain",
        "'langchain-core>=1.8'",
    )
    raise ImportError(_HINT) from None

from pydantic import JsonValue

from convstore.domain.blocks import Block
from convstore.domain.conversation import EntryMessage
from convstore.domain.errors import InvalidBlock, InvalidInput
from convstore.domain.events import Role
from convstore.domain.limits import Limits
from convstore.domain.parsing import parse_block, parse_id
from convstore.engine.plan import JSONDict
from convstore.store import EntryBatch, Store
from convstore.store.aio import AsyncStore, as_async

__all__ = [
    "ConvstoreChatMessageHistory",
    "conversation_for",
    "entry_messages",
    "message_blocks",
    "message_entry",
    "messages_from_replay",
]

NAMESPACE = UUID("0f6d2b1e-6c1a-4b8e-9d4f-7a3e5c2b1d90")
"""The UUID5 namespace a LangChain session id is hashed in (fixed forever)."""

ROLE_OF_TYPE: dict[str, Role] = {"system": "system", "human": "user", "ai": "assistant"}
"""The convstore role of each LangChain message type (a tool message is the user's)."""

CHAT_ROLES: dict[str, Role] = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
}
"""The roles a ``ChatMessage`` may name, and the convstore role each is."""

JSONBlock = dict[str, Any]


def conversation_for(session_id: str) -> UUID:
    """The conversation that holds the LangChain session ``session_id``, in any process."""
    return uuid5(NAMESPACE, session_id)


# -- LangChain messages as blocks -------------------------------------------------------------


def message_blocks(message: BaseMessage, limits: Limits | None = None) -> tuple[Role, list[Block]]:
    """One LangChain message as a convstore role and checked blocks; no I/O.

    Its content is read through LangChain's standard content blocks (``content_blocks``), so
    provider-specific parts (OpenAI's ``image_url``, Anthropic's ``thinking``) arrive in one
    shape. A part convstore cannot keep (audio, video, an image by file id, an unknown
    ``non_standard`` part) is refused with :class:`~convstore.InvalidInput` naming it.
    """
    role = _role(message)
    blocks: list[JSONBlock]
    if isinstance(message, ToolMessage):
        parts = [_part(b) for b in message.content_blocks]
        content: str | list[JSONBlock] = parts
        if all(p["type"] == "text" for p in parts):
            content = "\n".join(p["text"] for p in parts)
        blocks = [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": content,
                "is_error": message.status == "error",
            }
            | ({"name": message.name} if message.name else {})
        ]
    else:
        blocks = [_part(b) for b in message.content_blocks]
        if isinstance(message, AIMessage):
            blocks.extend(_invalid_call(call) for call in message.invalid_tool_calls)
    try:
        return role, [parse_block(b, limits) for b in blocks]
    except InvalidBlock as exc:
        msg = f"a LangChain {message.type} message: {exc}"
        raise InvalidBlock(msg) from None


def _role(message: BaseMessage) -> Role:
    if isinstance(message, ToolMessage):
        return "user"
    if isinstance(message, ChatMessage):
        role = CHAT_ROLES.get(message.role)
        if role is None:
            msg = (
                f"a LangChain chat message with role {message.role!r} (known: {sorted(CHAT_ROLES)})"
            )
            raise InvalidInput(msg)
        return role
    if isinstance(message, SystemMessage | HumanMessage | AIMessage):
        return ROLE_OF_TYPE[message.type]
    msg = (
        f"a LangChain message of type {message.type!r} cannot be recorded "
        "(known: system, human, ai, tool, chat)"
    )
    raise InvalidInput(msg)


def _part(block: Mapping[str, Any]) -> JSONBlock:
    """One standard content block as a convstore block."""
    kind = block.get("type")
    match kind:
        case "text":
            text: JSONBlock = {"type": "text", "text": block["text"]}
            if block.get("annotations"):
                text["annotations"] = list(block["annotations"])
            return text
        case "reasoning":
            extras = block.get("extras") or {}
            reasoning: JSONBlock = {"type": "reasoning", "text": block.get("reasoning", "")}
            if isinstance(extras.get("signature"), str):
                reasoning["signature"] = extras["signature"]
            return reasoning
        case "tool_call":
            return {
                "type": "tool_use",
                "id": block["id"],
                "name": block["name"],
                "input": block["args"],
            }
        case "server_tool_call":
            return {
                "type": "hosted_tool_use",
                "id": block["id"],
                "name": block["name"],
                "input": block.get("args", {}),
                "provider_data": dict(block),
            }
        case "server_tool_result":
            output = block.get("output")
            return {
                "type": "hosted_tool_result",
                "tool_use_id": block["tool_call_id"],
                "content": output if isinstance(output, str) else json.dumps(output),
                "is_error": block.get("status") == "error",
                "provider_data": dict(block),
            }
        case "image" | "file" | "text-plain":
            return _media(block)
        case "non_standard":
            return _non_standard(block["value"])
        case _:
            msg = f"a LangChain content block of type {kind!r} cannot be recorded"
            raise InvalidInput(msg)


def _media(block: Mapping[str, Any]) -> JSONBlock:
    kind, mime = block["type"], block.get("mime_type")
    if block.get("file_id") is not None and kind == "image":
        msg = "a LangChain image given by file_id cannot be recorded (its bytes are not here)"
        raise InvalidInput(msg)
    source = {k: block[k] for k in ("base64", "url", "file_id", "text") if block.get(k) is not None}
    keys = {"base64": "data"}
    out: JSONBlock = {"type": "image" if kind == "image" else "document"}
    out |= {keys.get(k, k): v for k, v in source.items()}
    if mime is not None:
        out["media_type"] = mime
    name = (block.get("extras") or {}).get("filename")
    if kind != "image" and isinstance(name, str):
        out["name"] = name
    return out


def _non_standard(value: Mapping[str, Any]) -> JSONBlock:
    """Anthropic's thinking parts, which ``content_blocks`` leaves as they came."""
    match value.get("type"):
        case "thinking":
            out: JSONBlock = {"type": "reasoning", "text": value.get("thinking", "")}
            if isinstance(value.get("signature"), str):
                out["signature"] = value["signature"]
            return out
        case "redacted_thinking":
            return {
                "type": "reasoning",
                "text": "",
                "redacted": True,
                "encrypted_content": value["data"],
            }
        case other:
            msg = f"a LangChain non-standard content part of type {other!r} cannot be recorded"
            raise InvalidInput(msg)


def _invalid_call(call: Mapping[str, Any]) -> JSONBlock:
    """A tool call whose arguments did not parse: the raw arguments text, kept exactly."""
    return {
        "type": "tool_use",
        "id": call.get("id") or "",
        "name": call.get("name") or "",
        "input": call.get("args") or "",
    }


# -- entries: the message verbatim, and what it carries ---------------------------------------


def message_entry(message: BaseMessage) -> dict[str, JsonValue]:
    """The runtime entry that keeps ``message`` verbatim (``message_to_dict``); its ``uuid``
    (the idempotency key) is the message's id when it has one."""
    entry: dict[str, Any] = {"langchain": message_to_dict(message)}
    if message.id:
        entry["uuid"] = f"langchain:{message.id}"
    return cast(dict[str, JsonValue], entry)


def entry_messages(messages: Sequence[BaseMessage], limits: Limits) -> list[EntryMessage]:
    """The convstore messages ``messages`` carry, each ended; refused whole on a bad part."""
    carried: list[EntryMessage] = []
    for position, message in enumerate(messages):
        try:
            role, blocks = message_blocks(message, limits)
        except (InvalidInput, InvalidBlock) as exc:
            msg = f"message {position}: {exc}"
            raise type(exc)(msg) from None
        carried.append((role, blocks, "ended", None))
    return carried


def _key(entry: Mapping[str, Any]) -> str:
    return json.dumps(entry, sort_keys=True)


def messages_from_replay(request: JSONDict) -> list[BaseMessage]:
    """An OpenAI-shaped replay (``{"messages": [...]}``) as LangChain messages."""
    out: list[BaseMessage] = []
    for message in request["messages"]:
        role, content = message["role"], message["content"]
        if role == "system":
            out.append(SystemMessage(content=content))
        elif role == "user":
            out.append(HumanMessage(content=content))
        else:
            out.append(AIMessage(content=content))
    return out


# -- the history --------------------------------------------------------------------------------


class ConvstoreChatMessageHistory(BaseChatMessageHistory):
    """A LangChain chat history whose messages live in a convstore store.

    ``store`` is a :class:`~convstore.Store` or an :class:`~convstore.AsyncStore`: the sync
    methods use the ``Store`` (an ``AsyncStore``'s own), the async ones the ``AsyncStore``
    (a ``Store`` through :func:`convstore.store.aio.as_async`). ``vision`` says whether the
    model can see images (replay shows them natively, else as markers). ``conversation_id``
    keeps the session in that convstore conversation instead of :func:`conversation_for` of
    ``session_id``: how a conversation recorded through another framework is handed over (made
    if it does not exist yet).
    """

    def __init__(
        self,
        session_id: str,
        *,
        store: Store | AsyncStore,
        vision: bool = False,
        conversation_id: UUID | str | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            msg = "session_id must be a non-empty string"
            raise InvalidInput(msg)
        self.session_id = session_id
        self.store = store.store if isinstance(store, AsyncStore) else store
        self.vision = vision
        self.conversation_id = (
            conversation_for(session_id)
            if conversation_id is None
            else parse_id(conversation_id, "conversation")
        )
        """The convstore conversation that holds this session: ``conversation_id`` when given,
        else :func:`conversation_for` of the session id."""
        self._title = f"langchain session {session_id}"
        self._created = False

    @property
    def _twin(self) -> AsyncStore:
        return as_async(self.store)

    def _conversation(self) -> UUID:
        if not self._created:
            # InvalidInput: it exists already (an earlier run, or another process, made it).
            with contextlib.suppress(InvalidInput):
                self.store.new_conversation(self._title, conversation_id=self.conversation_id)
            self._created = True
        return self.conversation_id

    async def _aconversation(self) -> UUID:
        if not self._created:
            with contextlib.suppress(InvalidInput):  # it exists already
                await self._twin.new_conversation(self._title, conversation_id=self.conversation_id)
            self._created = True
        return self.conversation_id

    def _batch(self, messages: Sequence[BaseMessage]) -> tuple[list[dict[str, Any]], Any]:
        """The entries for ``messages`` and the function that gives what they carry; every
        message converted first, so a bad one leaves the session untouched."""
        entries = [message_entry(m) for m in messages]
        carried = entry_messages(messages, self.store.limits)
        # record_entries hands back the entries not recorded yet, as copies: found by content
        # (two equal entries carry equal messages).
        by_key = {_key(e): c for e, c in zip(entries, carried, strict=True)}

        def carry(fresh: list[dict[str, JsonValue]]) -> EntryBatch:
            return [by_key[_key(e)] for e in fresh], []

        return [dict(e) for e in entries], carry

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The history as the next model call can be sent it: the replay, every block as
        prose, one message per stored message."""
        return messages_from_replay(self.store.replay(self._conversation(), vision=self.vision))

    async def aget_messages(self) -> list[BaseMessage]:
        """:attr:`messages`, off the event loop."""
        conversation = await self._aconversation()
        return messages_from_replay(await self._twin.replay(conversation, vision=self.vision))

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Record ``messages`` in one write (a message whose id was recorded is skipped)."""
        if messages:
            entries, carry = self._batch(list(messages))
            self.store.record_entries(self._conversation(), entries, carry)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """:meth:`add_messages`, off the event loop."""
        if messages:
            entries, carry = self._batch(list(messages))
            await self._twin.record_entries(await self._aconversation(), entries, carry)

    def clear(self) -> None:
        """Withdraw every message from replay; the log keeps them (``convstore erase`` deletes
        the conversation for good)."""
        self.store.delete_entries(self._conversation())

    async def aclear(self) -> None:
        """:meth:`clear`, off the event loop."""
        await self._twin.delete_entries(await self._aconversation())
