"""convstore: an event-sourced conversation store for LLM agent runtimes.

One history per conversation, recorded block by block as immutable events; every surface
replays that same record as provider wire messages.
"""

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
from convstore.projections.replay import Shape, replay
from convstore.routing import ShardedStores, shard_for
from convstore.store import ConversationInfo, Store

__all__ = [
    "Block",
    "BlockAppended",
    "ConcurrencyError",
    "ConversationInfo",
    "ConversationNotFound",
    "ConversationStarted",
    "ConvstoreError",
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
    "open_store",
    "replay",
    "shard_for",
]
