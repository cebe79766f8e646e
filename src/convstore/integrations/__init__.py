"""Adapters for agent frameworks, one module per framework, each behind its own extra."""
