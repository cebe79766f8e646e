"""The application around the store: the composition root (``open_store``), the projector
that keeps read models in step, exports and the demo.

This package's ``__init__`` imports nothing.
"""
