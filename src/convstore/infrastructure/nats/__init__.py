"""The NATS JetStream backend: the event log on a replicated stream, the read models in a
local SQLite replica fed from it (see :mod:`convstore.infrastructure.nats.backend`)."""
