"""Verifying a store's log, as ``convstore verify`` and ``convstore upgrade`` do."""

from __future__ import annotations

from uuid import UUID

from convstore.domain.errors import ConvstoreError
from convstore.ports.chain import chain_key
from convstore.store import Store
from convstore.store.verify import Problem, Verifier


def store_verifier(store: Store) -> Verifier:
    """A verifier of ``store`` holding its heads as they are now, which reads the log again
    (heads, newest versions, tombstones) where the scan and those heads disagree."""

    def newest(conversation: UUID) -> int:
        try:
            last = store.last_event(conversation)
        except ConvstoreError:  # a damaged newest event: the scan has reported it
            return 0
        return 0 if last is None else last.originator_version

    erased: set[UUID] = set()
    seen = 0

    def is_erased(conversation: UUID) -> bool:
        nonlocal seen
        if conversation not in erased:
            for tombstone in store.erasures(after=seen):
                erased.add(tombstone.id)
                seen = tombstone.seq
        return conversation in erased

    return Verifier(
        heads=store.heads(),
        key=chain_key(),
        now=lambda: (store.heads(), newest),
        erased=is_erased,
    )


def log_problems(store: Store) -> tuple[Verifier, list[Problem]]:
    """Every problem of ``store``'s log (each stored row, each conversation's rules and hash
    chain) and of its files (the storage engine's own check), with the verifier that found
    them (its counts of events and conversations)."""
    verifier = store_verifier(store)
    verifier.check_all(store.scan())
    problems = list(verifier.problems)
    problems += [Problem(None, "", None, f"storage: {t}") for t in store.storage_problems()]
    return verifier, problems
