"""The natural partition: the dataset's own users are the clients (``kind = "natural"``).

A dataset that names the user of each train row (:attr:`Dataset.users`) is dealt by user, not
by label: each kept user becomes one client holding all of its rows, split into its own train
and test rows (``test_fraction``, seeded). Users with fewer than ``min_size`` rows are dropped.
``num_clients`` is a cap, not a target: when more users qualify, a seeded draw of
``num_clients`` of them is kept (a 100,000-user log still simulates with 100 clients); when
fewer do, every one is kept. Client ids 0..K-1 follow the order of the user ids.

Every random choice about a user hangs on the seed and that user alone: whether the cap
keeps it and whether it is held out (the users of the smallest keys, each key drawn from
(seed, user id)), and which of its rows are its own test rows (its rows ordered by a
SplitMix64 stream, Steele et al. 2014, seeded by (seed, user id)). Adding, dropping or
capping other users leaves a user's part as it was, so runs compare user by user.

No Python loop runs over the users: a stable argsort groups the rows by user, one lexsort on
those keys shuffles inside every user at once, and offsets cut the result into clients
(10,000 users and 1M rows: docs/benchmarks.md).
"""

from __future__ import annotations

from dataclasses import astuple, dataclass

import numpy as np
import torch

from pflkit.sdk.data.partition import PartitionError
from pflkit.sdk.seeding import derive_seed

DRAWS_RULE = 1  # stored with a deal: 1 = every draw about a user keyed by (seed, user id)


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
        """Tensors stored beside the partition's rows (``users``, ``users.summary``, ...).

        ``users.draws`` names the rule of the draws, so a resume can tell a deal stored by an
        older pflkit (none: a user's draws hung on the other users) from a changed dataset.
        """
        summary = [self.total, self.too_small, self.over_cap, self.min_size]
        out = {"users": torch.from_numpy(self.ids.astype(np.int64)),
               "users.summary": torch.tensor(summary, dtype=torch.int64),
               "users.draws": torch.tensor([DRAWS_RULE], dtype=torch.int64)}
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
    """Each client's rows (ascending indices), who the clients are, which are held out."""

    train: list[np.ndarray]
    test: list[np.ndarray]
    users: Users
    new_clients: list[int]


def group_by_user(users: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(order, ids, counts)``: ``users[order]`` runs user by user, rows ascending inside."""
    order = np.argsort(users, kind="stable")
    ranked = users[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    return order, ranked[starts], np.diff(np.r_[starts, len(ranked)])


# SplitMix64's increment and finalizer constants (Steele, Lea and Flood, OOPSLA 2014)
_GAMMA, _MIX1, _MIX2 = (np.uint64(c) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9,
                                              0x94D049BB133111EB))


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: a bijection of uint64 that scatters nearby inputs."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def user_keys(ids: np.ndarray, seed: int) -> np.ndarray:
    """A random uint64 key for each user id, from (``seed``, id) alone.

    Distinct ids get distinct keys (both steps are bijections): ordering by key is a seeded
    shuffle of the users.
    """
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps, as SplitMix64's does
        return _mix(np.uint64(seed) ^ ids.astype(np.int64).view(np.uint64))


def _smallest(keys: np.ndarray, k: int) -> np.ndarray:
    """Mask of the ``k`` smallest ``keys``: a uniform draw of k users.

    A user's absence does not reshuffle the others (they keep their keys): at most one drawn
    user changes.
    """
    chosen = np.zeros(len(keys), dtype=bool)
    chosen[np.argsort(keys)[:k]] = True
    return chosen


def row_keys(ids: np.ndarray, counts: np.ndarray, seed: int) -> np.ndarray:
    """A random uint64 key for each row of each user: user ``ids[i]``'s ``counts[i]`` rows.

    The k-th row of user u gets the k-th draw of a SplitMix64 stream seeded by (``seed``, u),
    so its key depends on nothing but the seed, the user id and k, never on other users.
    """
    k = np.arange(counts.sum(), dtype=np.uint64) - np.repeat(np.cumsum(counts) - counts,
                                                              counts).astype(np.uint64)
    with np.errstate(over="ignore"):
        return _mix(np.repeat(user_keys(ids, seed), counts) + (k + np.uint64(1)) * _GAMMA)


def split_each(ids: np.ndarray, counts: np.ndarray, test_fraction: float, seed: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Mark ``round(test_fraction * n)`` random rows of each user as test.

    The rows run user by user (users ``ids``, sizes ``counts``); returns the test mask.
    A group keeps at least one train row, so no client is left without data to train on.
    """
    group = np.repeat(np.arange(len(counts)), counts)
    n_test = np.minimum(np.round(test_fraction * counts).astype(np.int64), counts - 1)
    shuffled = np.lexsort((row_keys(ids, counts, seed), group))  # random order in each group
    starts = np.cumsum(counts) - counts
    rank = np.arange(len(group)) - starts[group[shuffled]]
    is_test = np.empty(len(group), dtype=bool)
    is_test[shuffled] = rank < n_test[group[shuffled]]
    return is_test, n_test


def natural(users: np.ndarray, min_size: int, max_clients: int, test_fraction: float,
            num_new: int, seed: int) -> NaturalDeal:
    """Deal the rows of each user with at least ``min_size`` rows to a client of its own.

    ``seed`` (the run's) with a user's id alone decides whether the cap keeps it, whether it
    is one of the ``num_new`` held out and which of its rows are its own test rows.
    """
    order, ids, counts = group_by_user(np.asarray(users))
    big = counts >= max(min_size, 1)
    if not big.any():
        raise PartitionError(f"data.min_size = {min_size}: no user has that many rows (the "
                             f"largest of the {len(ids)} users has {counts.max(initial=0)})")
    keep = big.copy()
    if big.sum() > max_clients:  # the cap: a seeded draw among the users that qualify
        keep[big] = _smallest(user_keys(ids[big], derive_seed(seed, "partition", "natural")),
                              max_clients)
    rows = order[np.repeat(keep, counts)]
    kept = counts[keep]
    is_test, n_test = split_each(ids[keep], kept, test_fraction,
                                 derive_seed(seed, "client-split", "natural"))
    cut_train, cut_test = np.cumsum(kept - n_test)[:-1], np.cumsum(n_test)[:-1]
    rows_of = Rows(len(order), int(counts[~big].sum()), int(counts[big & ~keep].sum()),
                   int(n_test.sum()), int((n_test == 0).sum()) if test_fraction > 0 else 0)
    who = Users(ids[keep].astype(np.int64), len(ids), int((~big).sum()),
                int(big.sum() - keep.sum()), min_size, rows_of)
    held_out = _smallest(user_keys(who.ids, derive_seed(seed, "new-clients", "natural")),
                         num_new)
    return NaturalDeal(np.split(rows[~is_test], cut_train), np.split(rows[is_test], cut_test),
                       who, np.flatnonzero(held_out).tolist())
