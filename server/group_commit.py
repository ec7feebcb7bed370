"""Group commit: the writes of many concurrent requests become one transaction and one fsync.

Under load each accepted upload needs a durable commit before it is acknowledged. One commit
per upload made every request thread wait for SQLite's single write lock, whose busy handler
polls with sleeps of up to 100 ms, while the connection pool ran dry behind them: with 200
concurrent uploads and 2 workers, 64% of the upload handler's wall time went to waiting for
that lock (bench-server's py-spy profile). Here the first thread to arrive commits the rows of
every thread that queued up meanwhile, in one transaction; the others wait for its result and
one of them leads the next batch. Nobody is acknowledged before the commit holding its row.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class _Entry(Generic[T, R]):
    """One caller's item and, once its batch committed, its result or error."""

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = False
        self.result: R | None = None
        self.error: BaseException | None = None


class GroupCommit(Generic[T, R]):
    """Funnel items from many threads into ``commit(batch)`` calls, one batch at a time.

    ``commit`` gets the items queued since the previous batch started and returns, in order,
    each item's result or the exception to raise for it alone; an exception it raises is
    raised to every caller of the batch.
    """

    def __init__(self, commit: Callable[[list[T]], Sequence[R | BaseException]]) -> None:
        self._commit = commit
        self._pending: list[_Entry[T, R]] = []
        self._leading = False
        self._changed = threading.Condition()

    def submit(self, item: T) -> R:
        """Commit ``item`` with whatever else is queued; its result once durable."""
        entry: _Entry[T, R] = _Entry(item)
        with self._changed:
            self._pending.append(entry)
            while self._leading and not entry.done:
                self._changed.wait()
            if not entry.done:  # no batch is committing: lead one, with everything queued
                self._leading = True
                batch, self._pending = self._pending, []
        if not entry.done:
            self._run(batch)
        if entry.error is not None:
            raise entry.error
        return entry.result  # type: ignore[return-value]

    def _run(self, batch: list[_Entry[T, R]]) -> None:
        try:
            outcomes: Sequence[R | BaseException] = self._commit([e.item for e in batch])
        except BaseException as err:  # noqa: BLE001 - every caller of the batch gets it
            outcomes = [err] * len(batch)
        with self._changed:
            for entry, outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    entry.error = outcome
                else:
                    entry.result = outcome
                entry.done = True
            self._leading = False
            self._changed.notify_all()  # the batch's callers return; one waiter leads next
