"""convstore's benchmarks: each convstore figure beside a baseline measured in the same run.

``bench/run.py`` is the entry point of the main suite (see ``bench/README.md``); each of its
benchmarks is one module here (``append``, ``replay``, ``cold``, ``rebuild``, ``postgres``,
``writers``, ``memory``, ``peer``, ``after_append``, ``disk``), sharing the workload, timing,
pairing, temporary stores and PostgreSQL schema of :mod:`bench.common` and the result table of
:mod:`bench.report`. The other scripts (``transfer.py``, ``async_stall.py``, ``listing.py``, …)
are standalone, each with its own command line.
"""
