"""The application around the store: the composition root (``open_store``), the projector
that keeps read models in step, exports, the demo, and the quick replay path the console script
tries before the command line loads.

This package's ``__init__`` imports nothing, so ``convstore.app.quick_replay`` loads alone.
"""
