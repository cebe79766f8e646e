"""What the backends share: the eventsourcing application and its mapper, the listing
tables, the retired replay-model tables an erasure still empties, the read-only connection,
GC pauses."""
