"""Infrastructure: eventsourcing wiring, the backends, and the one place that opens them."""
