"""Retention: ``pfl-admin prune`` deletes the blobs that no round can need again.

The server deletes nothing by itself: every round adds its global state and each accepted
update (about the model's size each) to the blob store. Pruning deletes

* the update blobs (and SecAgg masked inputs) of rounds that are closed or abandoned: a round
  never reopens once it closed, and a stopped run never resumes, so nothing reads them again;
* with ``keep_globals`` N, each run's global states but its newest N (the state after k
  rounds, k = 0 .. rounds done); without it every global state stays;
* blobs that no row names (an upload refused after its bytes were stored, a crash between a
  blob and its row).

It keeps, whatever it is asked: each run's current global state (what devices download, what
``pfl-export`` and a finished run's personalization use), the global state and every update
of an open or closing round (a paused run's too: ``runs resume``, a restart's redone close
and a device's pending upload need them), and every blob written or stored again in the last
``GRACE`` seconds: an upload or a round close may be about to commit a row naming it (see
``blobs.py``). The rows stay: run history, per-round metrics and the privacy accounting are
in the database and do not change; a pruned round's ``global_hash`` names no file any more.
Safe while the server runs, from any worker, and when two prunes overlap.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from pflkit.server.orm import Round, Run, SecAggMessage, Update
from pflkit.server.store import Store

GRACE = 3600.0  # seconds: a blob written or stored again since then is never pruned
ENDED = ("closed", "abandoned")  # round statuses that never change again
CHUNK = 500  # hashes per IN (...) lookup


@dataclass(frozen=True)
class PruneReport:
    """What a prune deleted (or, ``dry_run``, would delete)."""

    dry_run: bool
    files: int
    bytes: int
    updates: int  # of the files: updates and masked inputs of closed or abandoned rounds
    global_states: int  # older than each run's newest keep_globals
    unreferenced: int  # named by no row
    recent: int  # would go, but were written or stored again within GRACE: kept


@dataclass(frozen=True)
class _Rounds:
    """The round rows retention needs: per run, its global states by rounds done."""

    states: dict[int, dict[int, str]]  # run -> {rounds done k: the global state after k}
    live_starts: set[str]  # the global states open or closing rounds start from


class Retention:
    """Prune the blob store of a server (see the module doc)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def prune(self, keep_globals: int | None = None, dry_run: bool = False) -> PruneReport:
        """Delete what no round can need again; ``keep_globals``: per run, None keeps all."""
        cutoff = time.time() - GRACE  # before the rows are read: see the module doc
        with self.store.transaction() as s:
            rounds = _round_states(s)
            keep = _live_blobs(s) | set(s.scalars(select(Run.global_hash))) | rounds.live_starts
            global_states = {h for by_k in rounds.states.values() for h in by_k.values()}
            for by_k in rounds.states.values():
                newest = sorted(by_k)[-keep_globals:] if keep_globals else list(by_k)
                keep.update(by_k[k] for k in newest)
            candidates = {d: size for d, size in self.store.blobs.sizes() if d not in keep}
            updates = _update_blobs(s, candidates)
        counts = {"files": 0, "bytes": 0, "updates": 0, "global_states": 0, "unreferenced": 0,
                  "recent": 0}
        for digest, size in candidates.items():
            freed = self._remove(digest, size, cutoff, dry_run)
            if freed is None:  # newer than the cutoff; or gone already (another prune's)
                counts["recent"] += self.store.blobs.exists(digest)
                continue
            kind = "global_states" if digest in global_states else \
                "updates" if digest in updates else "unreferenced"
            counts[kind] += 1
            counts["files"] += 1
            counts["bytes"] += freed
        return PruneReport(dry_run, **counts)

    def _remove(self, digest: str, size: int, cutoff: float, dry_run: bool) -> int | None:
        """The bytes a blob frees (None: it stays, written or stored again since cutoff)."""
        if not dry_run:
            return self.store.blobs.remove_unless_touched(digest, cutoff)
        try:
            return size if os.stat(self.store.blobs.path(digest)).st_mtime < cutoff else None
        except FileNotFoundError:
            return None


def _round_states(s: Session) -> _Rounds:
    states: dict[int, dict[int, str]] = {}
    live_starts: set[str] = set()
    for run_id, index, status, start, result in s.execute(select(
            Round.run_id, Round.index, Round.status, Round.global_hash, Round.result_hash)):
        by_k = states.setdefault(run_id, {})
        by_k[index] = start
        if status == "closed" and result is not None:
            by_k[index + 1] = result
        if status not in ENDED:
            live_starts.add(start)
    return _Rounds(states, live_starts)


def _live_blobs(s: Session) -> set[str]:
    """Updates and masked inputs of rounds that are open or closing (in one statement each)."""
    live = Round.status.not_in(ENDED)
    blobs = set(s.scalars(select(Update.blob_hash).join(Round, Update.round_id == Round.id)
                          .where(live)))
    for payload in s.scalars(select(SecAggMessage.payload)
                             .join(Round, SecAggMessage.round_id == Round.id)
                             .where(live, SecAggMessage.step == "masked")):
        blobs.add(payload["blob"])
    return blobs


def _update_blobs(s: Session, digests: Iterable[str]) -> set[str]:
    """Which of ``digests`` are updates or masked inputs (for the report)."""
    wanted = list(digests)
    found: set[str] = set()
    for i in range(0, len(wanted), CHUNK):
        found.update(s.scalars(select(Update.blob_hash).distinct()
                               .where(Update.blob_hash.in_(wanted[i:i + CHUNK]))))
    for payload in s.scalars(select(SecAggMessage.payload)
                             .where(SecAggMessage.step == "masked")):
        found.add(payload["blob"])
    return found & set(wanted)
