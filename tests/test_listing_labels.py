"""A page filtered by labels: the index walked in page order, or a rare label's matches read
first. Both give the same rows (the contract suite pages both ways on every backend); these
tests pin which way SQLite is told to read, and that it does."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from convstore import open_store
from convstore.infrastructure.common.listing import DRIVE_RATIO, driving_label, select_page
from convstore.infrastructure.sqlite.recorder import SQLITE
from convstore.projections.listing import ListingQuery

RARE = ("user", "u3")
COMMON = ("tenant", "t")


def test_a_rare_label_is_read_first_and_a_common_one_walked() -> None:
    """Read from the rarest label when a walk would visit more than DRIVE_RATIO rows a match;
    a label nothing carries is read (it answers at once); no label, no choice."""
    assert driving_label([(2, RARE), (10_000, COMMON)], 10_000, None) == RARE
    assert driving_label([(10_000, COMMON)], 10_000, 50) is None
    assert driving_label([(0, RARE)], 10_000, 50) == RARE
    assert driving_label([], 10_000, 50) is None
    # At the boundary: 100 matches of 10,000 rows and a page of 20 visit ~2,000 rows.
    assert driving_label([(100, RARE)], 10_000, 20) is None
    assert driving_label([(99, RARE)], 10_000, 20) == RARE
    assert 99 * DRIVE_RATIO < 20 * 10_000 // 99


def test_sqlite_reads_a_driving_label_through_its_index(tmp_path: Path) -> None:
    """The statement for a driven page starts at the labels' (key, value) index and fetches
    each match's row by id; a walked page follows the index of its order."""
    location = tmp_path / "labels.db"
    with open_store(str(location)):
        pass
    query = ListingQuery(labels=(RARE, COMMON), order="active", limit=51)
    conn = sqlite3.connect(location)
    try:
        for drive, first in ((RARE, "convstore_labels_kv"), (None, "convstore_listing_active")):
            text, params = select_page(SQLITE, query, drive=drive)
            plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {text}", params)]
            assert first in plan[0], plan
    finally:
        conn.close()
