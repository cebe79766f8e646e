"""The ``convstore`` command line, end to end, split by area."""
