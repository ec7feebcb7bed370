"""The natural partition: the dataset's own users are the clients (``kind = "natural"``).

A dataset that names the user of each train row (:attr:`Dataset.users`) is dealt by user, not
by label: each kept user becomes one client holding all of its rows, split into its own train
and test rows (``test_fraction``, seeded). Users with fewer than ``min_size`` rows are dropped.
``num_clients`` is a cap, not a target: when more users qualify, a seeded draw of
``num_clients`` of them is kept (a 100,000-user log still simulates with 100 clients); when
fewer do, every one is kept. Client ids 0..K-1 follow the order of the user ids.

No Python loop runs over the users: a stable argsort groups the rows by user, one lexsort on
random keys shuffles inside every user at once, and offsets cut the result into clients
(10,000 users and 1M rows: docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

import numpy as np
import torch

from pflkit.sdk.data.partition import PartitionError


@dataclass(frozen=True)
class Rows:
    """Where the dataset's train rows went: so a report accounts for every row it was given."""

    total: int  # train rows in the dataset
    too_small: int  # rows of the users dropped by min_size
    over_cap: int  # rows of the users left out by the num_clients cap
    test: int  # rows kept as the clients' own test rows
    untested: int  # clients too small for an own test row although test_fraction > 0

    def describe(self) -> str:
        """One line for the partition table: every row is kept, dropped or left out."""
        kept = self.total - self.too_small - self.over_cap
        line = (f"rows: {kept} of the dataset's {self.total} train rows are the clients' "
                f"({kept - self.test} train, {self.test} own test); {self.too_small} dropped "
                f"with the users below min_size, {self.over_cap} left out by the cap")
        return line + (f"; {self.untested} clients have too few rows for an own test row "
                       "(their own-test scores are null)" if self.untested else "")


@dataclass(frozen=True)
class Users:
    """Which dataset user each client is, and how many users were left out (and why)."""

    ids: np.ndarray  # (clients,) int64: the user id of client 0, 1, ...
    total: int  # users in the dataset
    too_small: int  # users with fewer than min_size rows: dropped
    over_cap: int  # users that qualified beyond the num_clients cap: not drawn
    min_size: int
    rows: Rows | None = None  # None: read from a partition stored before rows were counted

    def describe(self) -> str:
        """One line for the partition table."""
        line = (f"natural partition: {len(self.ids)} of the dataset's {self.total} users are "
                f"the clients; {self.too_small} dropped (fewer than min_size = {self.min_size} "
                f"rows)")
        return line + (f", {self.over_cap} left out by the num_clients cap" if self.over_cap
                       else "")

    def to_state(self) -> dict[str, torch.Tensor]:
        """Tensors stored beside the partition's rows (``users``, ``users.summary``, ...)."""
        summary = [self.total, self.too_small, self.over_cap, self.min_size]
        out = {"users": torch.from_numpy(self.ids.astype(np.int64)),
               "users.summary": torch.tensor(summary, dtype=torch.int64)}
        if self.rows is not None:
            out["users.rows"] = torch.tensor(astuple(self.rows), dtype=torch.int64)
        return out

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor]) -> Users | None:
        """Inverse of :meth:`to_state`; None for a partition of another kind."""
        if "users" not in state:
            return None
        total, too_small, over_cap, min_size = state["users.summary"].tolist()
        rows = Rows(*state["users.rows"].tolist()) if "users.rows" in state else None
        return cls(state["users"].numpy(), total, too_small, over_cap, min_size, rows)


@dataclass(frozen=True)
class NaturalDeal:
    """Each client's train and test rows (ascending row indices) and who the clients are."""

    train: list[np.ndarray]
    test: list[np.ndarray]
    users: Users


def group_by_user(users: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(order, ids, counts)``: ``users[order]`` runs user by user, rows ascending inside."""
    order = np.argsort(users, kind="stable")
    ranked = users[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    return order, ranked[starts], np.diff(np.r_[starts, len(ranked)])


def split_each(rows: np.ndarray, counts: np.ndarray, test_fraction: float,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Mark ``round(test_fraction * n)`` random rows of each consecutive group as test.

    ``rows`` holds the groups one after another (sizes ``counts``); returns the test mask.
    A group keeps at least one train row, so no client is left without data to train on.
    """
    group = np.repeat(np.arange(len(counts)), counts)
    n_test = np.minimum(np.round(test_fraction * counts).astype(np.int64), counts - 1)
    shuffled = np.lexsort((rng.random(len(rows)), group))  # random order inside each group
    starts = np.cumsum(counts) - counts
    rank = np.arange(len(rows)) - starts[group[shuffled]]
    is_test = np.empty(len(rows), dtype=bool)
    is_test[shuffled] = rank < n_test[group[shuffled]]
    return is_test, n_test


def natural(users: np.ndarray, min_size: int, max_clients: int, test_fraction: float,
            keep_rng: np.random.Generator, split_rng: np.random.Generator) -> NaturalDeal:
    """Deal the rows of each user with at least ``min_size`` rows to a client of its own."""
    order, ids, counts = group_by_user(np.asarray(users))
    big = counts >= max(min_size, 1)
    if not big.any():
        raise PartitionError(f"data.min_size = {min_size}: no user has that many rows (the "
                             f"largest of the {len(ids)} users has {counts.max(initial=0)})")
    keep = big.copy()
    if big.sum() > max_clients:  # the cap: a seeded draw among the users that qualify
        keep[:] = False
        keep[np.sort(keep_rng.choice(np.flatnonzero(big), max_clients, replace=False))] = True
    rows = order[np.repeat(keep, counts)]
    kept = counts[keep]
    is_test, n_test = split_each(rows, kept, test_fraction, split_rng)
    cut_train, cut_test = np.cumsum(kept - n_test)[:-1], np.cumsum(n_test)[:-1]
    rows_of = Rows(len(order), int(counts[~big].sum()), int(counts[big & ~keep].sum()),
                   int(n_test.sum()), int((n_test == 0).sum()) if test_fraction > 0 else 0)
    who = Users(ids[keep].astype(np.int64), len(ids), int((~big).sum()),
                int(big.sum() - keep.sum()), min_size, rows_of)
    return NaturalDeal(np.split(rows[~is_test], cut_train), np.split(rows[is_test], cut_test),
                       who)
