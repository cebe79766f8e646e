"""convstore: an event-sourced conversation store for LLM agent runtimes.

One history per conversation, recorded block by block as immutable events; every surface
replays that same record as provider wire messages.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from convstore.aio import AsyncStore, open_async_store
    from convstore.domain.blocks import (
        Block,
        ImageBlock,
        ReasoningBlock,
        TextBlock,
        ToolResultBlock,
        ToolUseBlock,
    )
    from convstore.domain.events import (
        BlockAppended,
        ConversationStarted,
        Event,
        MessageEnded,
        MessageInterrupted,
        MessageStarted,
        Role,
    )
    from convstore.domain.limits import Limits
    from convstore.errors import (
        ConcurrencyError,
        ConversationErased,
        ConversationNotFound,
        ConvstoreError,
        InvalidBlock,
        InvalidInput,
        MessageClosed,
        MessageNotFound,
        NoStore,
        NotFound,
        StoreError,
    )
    from convstore.infrastructure.bootstrap import open_store
    from convstore.infrastructure.erasure import Erasure
    from convstore.projections.replay import Shape, replay
    from convstore.routing import ShardedStores, shard_for
    from convstore.store import ConversationInfo, Store

_EXPORTS = {
    "AsyncStore": "convstore.aio",
    "Block": "convstore.domain.blocks",
    "BlockAppended": "convstore.domain.events",
    "ConcurrencyError": "convstore.errors",
    "ConversationErased": "convstore.errors",
    "ConversationInfo": "convstore.store",
    "ConversationNotFound": "convstore.errors",
    "ConversationStarted": "convstore.domain.events",
    "ConvstoreError": "convstore.errors",
    "Erasure": "convstore.infrastructure.erasure",
    "Event": "convstore.domain.events",
    "ImageBlock": "convstore.domain.blocks",
    "InvalidBlock": "convstore.errors",
    "InvalidInput": "convstore.errors",
    "Limits": "convstore.domain.limits",
    "MessageClosed": "convstore.errors",
    "MessageEnded": "convstore.domain.events",
    "MessageInterrupted": "convstore.domain.events",
    "MessageNotFound": "convstore.errors",
    "MessageStarted": "convstore.domain.events",
    "NoStore": "convstore.errors",
    "NotFound": "convstore.errors",
    "ReasoningBlock": "convstore.domain.blocks",
    "Role": "convstore.domain.events",
    "Shape": "convstore.projections.replay",
    "ShardedStores": "convstore.routing",
    "Store": "convstore.store",
    "StoreError": "convstore.errors",
    "TextBlock": "convstore.domain.blocks",
    "ToolResultBlock": "convstore.domain.blocks",
    "ToolUseBlock": "convstore.domain.blocks",
    "open_async_store": "convstore.aio",
    "open_store": "convstore.infrastructure.bootstrap",
    "replay": "convstore.projections.replay",
    "shard_for": "convstore.routing",
}
"""Where each public name lives. Names load on first use (PEP 562), so a process that needs
only part of the package (``convstore replay`` from the shell, say) imports only that part."""


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        msg = f"module 'convstore' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "AsyncStore",
    "Block",
    "BlockAppended",
    "ConcurrencyError",
    "ConversationErased",
    "ConversationInfo",
    "ConversationNotFound",
    "ConversationStarted",
    "ConvstoreError",
    "Erasure",
    "Event",
    "ImageBlock",
    "InvalidBlock",
    "InvalidInput",
    "Limits",
    "MessageClosed",
    "MessageEnded",
    "MessageInterrupted",
    "MessageNotFound",
    "MessageStarted",
    "NoStore",
    "NotFound",
    "ReasoningBlock",
    "Role",
    "Shape",
    "ShardedStores",
    "Store",
    "StoreError",
    "TextBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "open_async_store",
    "open_store",
    "replay",
    "shard_for",
]
