"""Group commit: concurrent callers share one commit, and each gets only its own outcome."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from waiting import GUARD, wait_until

from pflkit.server.group_commit import GroupCommit


def test_callers_queued_behind_a_commit_share_the_next_one_and_get_their_own_outcome():
    batches: list[list[int]] = []
    first_may_finish = threading.Event()

    def commit(batch: list[int]) -> list[int | BaseException]:
        batches.append(batch)
        if len(batches) == 1:
            first_may_finish.wait(GUARD)  # the others queue up meanwhile
        return [ValueError(f"item {i}") if i == 3 else 10 * i for i in batch]

    group: GroupCommit[int, int] = GroupCommit(commit)
    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(group.submit, 0)]
        wait_until(lambda: batches, "the first commit started")
        futures += [pool.submit(group.submit, i) for i in range(1, 6)]
        # all five queued behind the first commit (not "after 0.5 s": a busy machine is slower)
        wait_until(lambda: len(group._pending) == 5, "five callers queued")
        first_may_finish.set()
        results = {}
        for i, future in enumerate(futures):
            try:
                results[i] = future.result(GUARD)
            except ValueError as err:
                results[i] = str(err)
    assert batches == [[0], [1, 2, 3, 4, 5]]
    assert results == {0: 0, 1: 10, 2: 20, 3: "item 3", 4: 40, 5: 50}


def test_a_failed_commit_fails_every_caller_of_its_batch_and_the_next_batch_runs():
    calls = []

    def commit(batch: list[str]) -> list[str]:
        calls.append(batch)
        if batch == ["bad"]:
            raise OSError("disk full")
        return [item.upper() for item in batch]

    group: GroupCommit[str, str] = GroupCommit(commit)
    with pytest.raises(OSError, match="disk full"):
        group.submit("bad")
    assert group.submit("good") == "GOOD"
    assert calls == [["bad"], ["good"]]
