"""Partitioners: who holds which samples. Pure functions of (labels, settings, rng).

Each returns one index array per client; every sample is assigned at most once (exactly once
for all partitioners here). The rng comes from :func:`pflkit.sdk.seeding.numpy_rng`, so a
seed fixes the partition.
"""

from __future__ import annotations

import numpy as np

# the [data] settings only some kinds read -> those kinds (the others refuse a value of them)
KIND_SETTINGS: dict[str, tuple[str, ...]] = {
    "alpha": ("dirichlet",),
    "shards_per_client": ("shards",),
    "min_size": ("dirichlet", "natural"),
}


class PartitionError(ValueError):
    """The requested partition cannot be built from this data (e.g. too few samples)."""


def iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffle and deal the samples into ``num_clients`` near-equal parts."""
    _check_clients(labels, num_clients)
    order = rng.permutation(len(labels))
    return [np.sort(part) for part in np.array_split(order, num_clients)]


def shards(
    labels: np.ndarray, num_clients: int, rng: np.random.Generator, shards_per_client: int = 2
) -> list[np.ndarray]:
    """McMahan et al.'s pathological non-IID split: equal label-sorted shards, dealt at random.

    Each client gets ``shards_per_client`` random shards. Shards are cut inside each class
    (the class's share of shards by largest remainder), so a shard never straddles two
    classes and a client holds at most ``shards_per_client`` classes even when class sizes
    are not multiples of the shard size.
    """
    _check_clients(labels, num_clients)
    num_shards = num_clients * shards_per_client
    classes, counts = np.unique(labels, return_counts=True)
    if num_shards > len(labels) or num_shards < len(classes):
        raise PartitionError(
            f"data.num_clients x data.shards_per_client = {num_shards} shards, but "
            f"{len(labels)} samples of {len(classes)} classes allow {len(classes)} to "
            f"{len(labels)} shards"
        )
    quota = counts / counts.sum() * num_shards
    per_class = np.maximum(np.floor(quota).astype(int), 1)
    while per_class.sum() < num_shards:
        per_class[np.argmax(quota - per_class)] += 1
    while per_class.sum() > num_shards:
        per_class[np.argmax(np.where(per_class > 1, per_class - quota, -np.inf))] -= 1
    pieces = [
        piece
        for c, k in zip(classes, per_class, strict=True)
        for piece in np.array_split(rng.permutation(np.flatnonzero(labels == c)), k)
    ]
    deal = rng.permutation(num_shards).reshape(num_clients, shards_per_client)
    return [np.sort(np.concatenate([pieces[s] for s in row])) for row in deal]


def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    alpha: float,
    rng: np.random.Generator,
    min_size: int = 10,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Hsu et al. (2019): class c's samples go to clients in proportions q_c ~ Dir(alpha).

    Client m gets the fraction q_c[m] of class c. Redraw the whole partition until every
    client has at least ``min_size`` samples (the usual practice of Lin et al. 2020), and at
    least one whatever ``min_size``: a client without rows would train on nothing each round
    it is sampled (``min_size = 0`` dealt 37 of 50 clients no row at alpha 0.001).
    """
    _check_clients(labels, num_clients)
    if alpha <= 0:
        raise PartitionError(f"Dirichlet alpha must be > 0, got {alpha}")
    if min_size * num_clients > len(labels):
        raise PartitionError(
            f"data.min_size = {min_size} x data.num_clients = {num_clients} exceeds the "
            f"{len(labels)} samples"
        )
    by_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    need = max(min_size, 1)
    for _ in range(max_tries):  # array work per try: 30,000 clients' hopeless tries took 4 min
        rows, owner = [], []
        for of_class in by_class:
            members = rng.permutation(of_class)
            q = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(q)[:-1] * len(members)).astype(int)
            rows.append(members)
            owner.append(np.repeat(np.arange(num_clients), np.diff(cuts, prepend=0,
                                                                    append=len(members))))
        who = np.concatenate(owner)
        sizes = np.bincount(who, minlength=num_clients)
        if sizes.min() >= need:
            every = np.concatenate(rows)
            return np.split(every[np.lexsort((every, who))], np.cumsum(sizes)[:-1])
    raise PartitionError(
        f"no Dirichlet({alpha}) partition gave every one of {num_clients} clients "
        f">= {need} samples in {max_tries} tries; "
        + ("lower min_size or raise alpha" if need > 1 else "raise alpha or lower num_clients")
    )


def split_new_clients(
    num_clients: int, num_new: int, rng: np.random.Generator
) -> tuple[list[int], list[int]]:
    """Choose ``num_new`` clients that never train (FedRoD's 'new clients'); the rest train."""
    if not 0 <= num_new < num_clients:
        raise PartitionError(f"num_new must be in [0, {num_clients}), got {num_new}")
    order = rng.permutation(num_clients)
    return sorted(order[num_new:].tolist()), sorted(order[:num_new].tolist())


def train_test_split(
    index: np.ndarray, test_fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Split one client's indices into its own train and test parts.

    The client keeps at least one train row (a large fraction of a small client would round
    to all of it: a client with nothing to train on), as natural partitions do.
    """
    if not 0.0 <= test_fraction < 1.0:
        raise PartitionError(f"test_fraction must be in [0, 1), got {test_fraction}")
    order = rng.permutation(index)
    n_test = min(int(round(test_fraction * len(index))), max(len(index) - 1, 0))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def _check_clients(labels: np.ndarray, num_clients: int) -> None:
    if num_clients <= 0:
        raise PartitionError(f"data.num_clients must be positive, got {num_clients}")
    if num_clients > len(labels):
        raise PartitionError(f"data.num_clients = {num_clients}: more clients than the "
                             f"{len(labels)} train rows (each client needs at least one)")
