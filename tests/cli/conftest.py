"""The command-line tests' fixtures: an unused store path, and two stores with content."""

from tests.cli.support import db, recorded, seeded

__all__ = ["db", "recorded", "seeded"]
