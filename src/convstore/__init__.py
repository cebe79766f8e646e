"""convstore: an event-sourced conversation store for LLM agent runtimes.

One history per conversation, recorded block by block as immutable events; every surface
replays that same record as provider wire messages.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from convstore.app.aio import (
        open_async_store as open_async_store,
    )
    from convstore.app.bootstrap import (
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
        DocumentBlock as DocumentBlock,
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
    from convstore.domain.errors import (
        AlreadyImported as AlreadyImported,
    )
    from convstore.domain.errors import (
        ConcurrencyError as ConcurrencyError,
    )
    from convstore.domain.errors import (
        ConversationActive as ConversationActive,
    )
    from convstore.domain.errors import (
        ConversationErased as ConversationErased,
    )
    from convstore.domain.errors import (
        ConversationNotFound as ConversationNotFound,
    )
    from convstore.domain.errors import (
        ConvstoreError as ConvstoreError,
    )
    from convstore.domain.errors import (
        DumpError as DumpError,
    )
    from convstore.domain.errors import (
        InvalidBlock as InvalidBlock,
    )
    from convstore.domain.errors import (
        InvalidInput as InvalidInput,
    )
    from convstore.domain.errors import (
        MessageClosed as MessageClosed,
    )
    from convstore.domain.errors import (
        MessageNotFound as MessageNotFound,
    )
    from convstore.domain.errors import (
        NoStore as NoStore,
    )
    from convstore.domain.errors import (
        NotFound as NotFound,
    )
    from convstore.domain.errors import (
        OutputError as OutputError,
    )
    from convstore.domain.errors import (
        ProjectionConflict as ProjectionConflict,
    )
    from convstore.domain.errors import (
        ReadModelBusy as ReadModelBusy,
    )
    from convstore.domain.errors import (
        ReadModelMoved as ReadModelMoved,
    )
    from convstore.domain.errors import (
        StoreError as StoreError,
    )
    from convstore.domain.errors import (
        VersionConflict as VersionConflict,
    )
    from convstore.domain.events import (
        BlockAppended as BlockAppended,
    )
    from convstore.domain.events import (
        BlockRecorded as BlockRecorded,
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
    from convstore.domain.events import (
        build_models as build_models,
    )
    from convstore.domain.limits import (
        Limits as Limits,
    )
    from convstore.engine.plan import (
        ReplayOptions as ReplayOptions,
    )
    from convstore.engine.plan import (
        Shape as Shape,
    )
    from convstore.engine.plan import (
        replay as replay,
    )
    from convstore.engine.pressure import (
        Pressure as Pressure,
    )
    from convstore.ports.chain import (
        Head as Head,
    )
    from convstore.ports.erasure import (
        Erasure as Erasure,
    )
    from convstore.ports.records import (
        Recorded as Recorded,
    )
    from convstore.projections.messages import (
        RecordedBlock as RecordedBlock,
    )
    from convstore.projections.messages import (
        RecordedMessage as RecordedMessage,
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
    from convstore.store.aio import (
        AsyncStore as AsyncStore,
    )
    from convstore.store.aio import (
        as_async as as_async,
    )
    from convstore.store.importing import (
        ImportReport as ImportReport,
    )
    from convstore.store.transfer import (
        LoadReport as LoadReport,
    )

_EXPORTS: dict[str, str] = {
    "ReadModelMoved": "convstore.domain.errors",
    "ReadModelBusy": "convstore.domain.errors",
    "ProjectionConflict": "convstore.domain.errors",
    "DumpError": "convstore.domain.errors",
    "AlreadyImported": "convstore.domain.errors",
    "AsyncStore": "convstore.store.aio",
    "Block": "convstore.domain.blocks",
    "BlockAppended": "convstore.domain.events",
    "BlockRecorded": "convstore.domain.events",
    "Compacted": "convstore.domain.events",
    "ConcurrencyError": "convstore.domain.errors",
    "ConversationActive": "convstore.domain.errors",
    "ConversationErased": "convstore.domain.errors",
    "ConversationInfo": "convstore.store",
    "ConversationNotFound": "convstore.domain.errors",
    "ConversationRenamed": "convstore.domain.events",
    "ConversationStarted": "convstore.domain.events",
    "DocumentBlock": "convstore.domain.blocks",
    "ConvstoreError": "convstore.domain.errors",
    "EntriesDeleted": "convstore.domain.events",
    "EntriesRecorded": "convstore.domain.events",
    "Erasure": "convstore.ports.erasure",
    "Event": "convstore.domain.events",
    "Head": "convstore.ports.chain",
    "History": "convstore.convert.history",
    "HistoryCompaction": "convstore.convert.history",
    "HistoryMessage": "convstore.convert.history",
    "ImageBlock": "convstore.domain.blocks",
    "ImportReport": "convstore.store.importing",
    "InvalidBlock": "convstore.domain.errors",
    "InvalidInput": "convstore.domain.errors",
    "LabelsRemoved": "convstore.domain.events",
    "LabelsSet": "convstore.domain.events",
    "Limits": "convstore.domain.limits",
    "LoadReport": "convstore.store.transfer",
    "MessageClosed": "convstore.domain.errors",
    "MessageEnded": "convstore.domain.events",
    "MessageInterrupted": "convstore.domain.events",
    "MessageMeta": "convstore.domain.events",
    "MessageMetaRecorded": "convstore.domain.events",
    "MessageNotFound": "convstore.domain.errors",
    "MessageStarted": "convstore.domain.events",
    "NoStore": "convstore.domain.errors",
    "NotFound": "convstore.domain.errors",
    "OutputError": "convstore.domain.errors",
    "Page": "convstore.store",
    "Pressure": "convstore.engine.pressure",
    "ReasoningBlock": "convstore.domain.blocks",
    "Recorded": "convstore.ports.records",
    "RecordedBlock": "convstore.projections.messages",
    "RecordedMessage": "convstore.projections.messages",
    "Rewound": "convstore.domain.events",
    "ReplayOptions": "convstore.engine.plan",
    "Role": "convstore.domain.events",
    "Shape": "convstore.engine.plan",
    "Store": "convstore.store",
    "StoreError": "convstore.domain.errors",
    "TextBlock": "convstore.domain.blocks",
    "TokenUsage": "convstore.domain.events",
    "ToolResultBlock": "convstore.domain.blocks",
    "ToolUseBlock": "convstore.domain.blocks",
    "as_async": "convstore.store.aio",
    "build_models": "convstore.domain.events",
    "VersionConflict": "convstore.domain.errors",
    "open_async_store": "convstore.app.aio",
    "open_store": "convstore.app.bootstrap",
    "replay": "convstore.engine.plan",
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
