"""The audit read model: a SQLite file of per-block facts with full-text search, fed from the
log by the projector, and read by `convstore audit`, `serve` and the web pages."""
