#!/usr/bin/env python
"""convstore benchmarks, each timed against a raw-driver baseline in the same run.

    python bench/run.py [--quick] [--only NAME[,NAME...]] [--json] [--pg-url URL] [--dir DIR]

The benchmarks are the modules of the ``bench`` package (see bench/README.md); this file only
makes the package importable when run as a script and hands over to :func:`bench.cli.main`.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ in {"__main__", "__mp_main__"}:
    # Run as a script, Python puts bench/ itself first on sys.path, where the benchmark
    # modules would shadow top-level names; import them as the package from the repo root.
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(_here)]
    sys.path.insert(0, str(Path(_here).parent))

from bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
