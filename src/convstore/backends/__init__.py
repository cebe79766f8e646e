"""The backends: what every backend shares (``common``), and one folder per backend
(``sqlite``, ``postgres``), each implementing the port in :mod:`convstore.ports`."""
