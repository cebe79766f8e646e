"""Recorders: provider responses and streams (OpenAI, Anthropic) written into a store as they
arrive, over the pure conversions in :mod:`convstore.convert`."""
