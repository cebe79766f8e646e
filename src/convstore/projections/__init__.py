"""Projections: pure functions from recorded events to derived views. No I/O here."""
