"""What the backends share: the eventsourcing application and its mapper, the listing and
replay-model tables, the read-only connection, GC pauses."""
