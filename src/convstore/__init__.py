"""convstore: an event-sourced conversation store for LLM agent runtimes.

One history per conversation, recorded block by block as immutable events; every surface
replays that same record as provider wire messages.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from convstore.aio import (
        AsyncStore as AsyncStore,
    )
    from convstore.aio import (
        as_async as as_async,
    )
    from convstore.aio import (
        open_async_store as open_async_store,
    )
    from convstore.bootstrap import (
        open_store as open_store,
    )
    from convstore.convert.history import (
        History as History,
    )
    from convstore.convert.history import (
        HistoryCompaction as HistoryCompaction,
    )
    from convstore.convert.history import (
        HistoryMessage as HistoryMessage,
    )
    from convstore.domain.blocks import (
        Block as Block,
    )
    from convstore.domain.blocks import (
        ImageBlock as ImageBlock,
    )
    from convstore.domain.blocks import (
        ReasoningBlock as ReasoningBlock,
    )
    from convstore.domain.blocks import (
        TextBlock as TextBlock,
    )
    from convstore.domain.blocks import (
        ToolResultBlock as ToolResultBlock,
    )
    from convstore.domain.blocks import (
        ToolUseBlock as ToolUseBlock,
    )
    from convstore.domain.events import (
        BlockAppended as BlockAppended,
    )
    from convstore.domain.events import (
        Compacted as Compacted,
    )
    from convstore.domain.events import (
        ConversationRenamed as ConversationRenamed,
    )
    from convstore.domain.events import (
        ConversationStarted as ConversationStarted,
    )
    from convstore.domain.events import (
        EntriesDeleted as EntriesDeleted,
    )
    from convstore.domain.events import (
        EntriesRecorded as EntriesRecorded,
    )
    from convstore.domain.events import (
        Event as Event,
    )
    from convstore.domain.events import (
        LabelsRemoved as LabelsRemoved,
    )
    from convstore.domain.events import (
        LabelsSet as LabelsSet,
    )
    from convstore.domain.events import (
        MessageEnded as MessageEnded,
    )
    from convstore.domain.events import (
        MessageInterrupted as MessageInterrupted,
    )
    from convstore.domain.events import (
        MessageMeta as MessageMeta,
    )
    from convstore.domain.events import (
        MessageMetaRecorded as MessageMetaRecorded,
    )
    from convstore.domain.events import (
        MessageStarted as MessageStarted,
    )
    from convstore.domain.events import (
        Rewound as Rewound,
    )
    from convstore.domain.events import (
        Role as Role,
    )
    from convstore.domain.events import (
        TokenUsage as TokenUsage,
    )
    from convstore.domain.limits import (
        Limits as Limits,
    )
    from convstore.errors import (
        ConcurrencyError as ConcurrencyError,
    )
    from convstore.errors import (
        ConversationActive as ConversationActive,
    )
    from convstore.errors import (
        ConversationErased as ConversationErased,
    )
    from convstore.errors import (
        ConversationNotFound as ConversationNotFound,
    )
    from convstore.errors import (
        ConvstoreError as ConvstoreError,
    )
    from convstore.errors import (
        InvalidBlock as InvalidBlock,
    )
    from convstore.errors import (
        InvalidInput as InvalidInput,
    )
    from convstore.errors import (
        MessageClosed as MessageClosed,
    )
    from convstore.errors import (
        MessageNotFound as MessageNotFound,
    )
    from convstore.errors import (
        NoStore as NoStore,
    )
    from convstore.errors import (
        NotFound as NotFound,
    )
    from convstore.errors import (
        OutputError as OutputError,
    )
    from convstore.errors import (
        StoreError as StoreError,
    )
    from convstore.errors import (
        VersionConflict as VersionConflict,
    )
    from convstore.importing import (
        ImportReport as ImportReport,
    )
    from convstore.infrastructure.chain import (
        Head as Head,
    )
    from convstore.infrastructure.erasure import (
        Erasure as Erasure,
    )
    from convstore.infrastructure.records import (
        Recorded as Recorded,
    )
    from convstore.projections.messages import (
        RecordedBlock as RecordedBlock,
    )
    from convstore.projections.messages import (
        RecordedMessage as RecordedMessage,
    )
    from convstore.projections.pressure import (
        Pressure as Pressure,
    )
    from convstore.projections.replay import (
        ReplayOptions as ReplayOptions,
    )
    from convstore.projections.replay import (
        Shape as Shape,
    )
    from convstore.projections.replay import (
        replay as replay,
    )
    from convstore.routing import (
        ShardedStores as ShardedStores,
    )
    from convstore.routing import (
        shard_for as shard_for,
    )
    from convstore.store import (
        ConversationInfo as ConversationInfo,
    )
    from convstore.store import (
        Page as Page,
    )
    from convstore.store import (
        Store as Store,
    )
    from convstore.transfer import (
        LoadReport as LoadReport,
    )

_EXPORTS: dict[str, str] = {
    "AsyncStore": "convstore.aio",
    "Block": "convstore.domain.blocks",
    "BlockAppended": "convstore.domain.events",
    "Compacted": "convstore.domain.events",
    "ConcurrencyError": "convstore.errors",
    "ConversationActive": "convstore.errors",
    "ConversationErased": "convstore.errors",
    "ConversationInfo": "convstore.store",
    "ConversationNotFound": "convstore.errors",
    "ConversationRenamed": "convstore.domain.events",
    "ConversationStarted": "convstore.domain.events",
    "ConvstoreError": "convstore.errors",
    "EntriesDeleted": "convstore.domain.events",
    "EntriesRecorded": "convstore.domain.events",
    "Erasure": "convstore.infrastructure.erasure",
    "Event": "convstore.domain.events",
    "Head": "convstore.infrastructure.chain",
    "History": "convstore.convert.history",
    "HistoryCompaction": "convstore.convert.history",
    "HistoryMessage": "convstore.convert.history",
    "ImageBlock": "convstore.domain.blocks",
    "ImportReport": "convstore.importing",
    "InvalidBlock": "convstore.errors",
    "InvalidInput": "convstore.errors",
    "LabelsRemoved": "convstore.domain.events",
    "LabelsSet": "convstore.domain.events",
    "Limits": "convstore.domain.limits",
    "LoadReport": "convstore.transfer",
    "MessageClosed": "convstore.errors",
    "MessageEnded": "convstore.domain.events",
    "MessageInterrupted": "convstore.domain.events",
    "MessageMeta": "convstore.domain.events",
    "MessageMetaRecorded": "convstore.domain.events",
    "MessageNotFound": "convstore.errors",
    "MessageStarted": "convstore.domain.events",
    "NoStore": "convstore.errors",
    "NotFound": "convstore.errors",
    "OutputError": "convstore.errors",
    "Page": "convstore.store",
    "Pressure": "convstore.projections.pressure",
    "ReasoningBlock": "convstore.domain.blocks",
    "Recorded": "convstore.infrastructure.records",
    "RecordedBlock": "convstore.projections.messages",
    "RecordedMessage": "convstore.projections.messages",
    "Rewound": "convstore.domain.events",
    "ReplayOptions": "convstore.projections.replay",
    "Role": "convstore.domain.events",
    "Shape": "convstore.projections.replay",
    "ShardedStores": "convstore.routing",
    "Store": "convstore.store",
    "StoreError": "convstore.errors",
    "TextBlock": "convstore.domain.blocks",
    "TokenUsage": "convstore.domain.events",
    "ToolResultBlock": "convstore.domain.blocks",
    "ToolUseBlock": "convstore.domain.blocks",
    "as_async": "convstore.aio",
    "VersionConflict": "convstore.errors",
    "open_async_store": "convstore.aio",
    "open_store": "convstore.bootstrap",
    "replay": "convstore.projections.replay",
    "shard_for": "convstore.routing",
}
"""The public names, and where each lives: the one list. ``__all__`` and ``__getattr__`` are
made from it, and a test checks the ``TYPE_CHECKING`` imports above name the same things. Names
load on first use (PEP 562), so a process that needs only part of the package (``convstore
replay`` from the shell, say) imports only that part."""

__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - made from the one list; a test checks it


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
