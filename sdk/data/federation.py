"""From a dataset and a partition recipe to the clients' data: the simulator's data side.

A :class:`PartitionConfig` is the whole recipe (kind, clients, alpha, test split, new
clients, label noise); with the run seed it fixes every client's train and test rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from pflkit.sdk.data import noise, partition
from pflkit.sdk.data.datasets import Dataset, DatasetSpec
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.seeding import numpy_rng

PARTITION_KINDS = ("iid", "shards", "dirichlet")


@dataclass(frozen=True)
class PartitionConfig:
    """How the training set is dealt to clients."""

    kind: str = "dirichlet"  # iid | shards (pathological) | dirichlet
    num_clients: int = 100
    alpha: float = 0.3  # Dirichlet concentration (kind = dirichlet)
    shards_per_client: int = 2  # kind = shards
    min_size: int = 10  # smallest client allowed (kind = dirichlet)
    test_fraction: float = 0.0  # share of each client's rows kept as its own test split
    num_new_clients: int = 0  # clients that never train (zero-shot / fine-tune evaluation)
    noise: str | None = None  # pair | symmetric: label noise on clients' train labels
    noise_rate: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in PARTITION_KINDS:
            raise ValueError(
                f"unknown partition '{self.kind}'; known: {', '.join(PARTITION_KINDS)}"
            )
        if self.noise is not None and self.noise not in noise.NOISE_KINDS:
            raise ValueError(f"unknown label noise '{self.noise}'")

    def to_dict(self) -> dict[str, object]:
        """Plain dict for config files and reports."""
        return asdict(self)


@dataclass(frozen=True)
class ClientData:
    """One client's rows: ``train`` for fitting, ``test`` (possibly empty) for its own metrics."""

    client_id: int
    train: LabeledTensors
    test: LabeledTensors

    def class_counts(self, num_classes: int) -> torch.Tensor:
        """Train samples per class (the client's class distribution, unnormalized)."""
        return self.train.class_counts(num_classes)


@dataclass(frozen=True)
class Federation:
    """Every client's data plus the global test set and the dataset spec."""

    spec: DatasetSpec
    clients: dict[int, ClientData]  # clients that take part in training
    new_clients: dict[int, ClientData]  # clients that never train
    test: LabeledTensors  # the dataset's global test set

    @property
    def all_clients(self) -> dict[int, ClientData]:
        """Training and new clients together, by id."""
        return {**self.clients, **self.new_clients}

    def class_histogram(self) -> np.ndarray:
        """(num_clients, num_classes) train counts, rows ordered by client id."""
        every = self.all_clients
        c = self.spec.num_classes
        return np.stack([every[k].class_counts(c).numpy() for k in sorted(every)])


def build_federation(dataset: Dataset, config: PartitionConfig, seed: int) -> Federation:
    """Deal ``dataset.train`` to clients as ``config`` says, seeded by ``seed``."""
    labels = dataset.train.y.numpy()
    rng = numpy_rng(seed, "partition", config.kind)
    if config.kind == "iid":
        parts = partition.iid(labels, config.num_clients, rng)
    elif config.kind == "shards":
        parts = partition.shards(labels, config.num_clients, rng, config.shards_per_client)
    else:
        parts = partition.dirichlet(labels, config.num_clients, config.alpha, rng,
                                    config.min_size)
    train_ids, new_ids = partition.split_new_clients(
        config.num_clients, config.num_new_clients, numpy_rng(seed, "new-clients")
    )
    clients: dict[int, ClientData] = {}
    for cid, rows in enumerate(parts):
        tr, te = partition.train_test_split(rows, config.test_fraction,
                                            numpy_rng(seed, "client-split", cid))
        train = dataset.train.subset(torch.from_numpy(tr))
        if config.noise is not None and config.noise_rate > 0:
            noisy = noise.apply_label_noise(train.y.numpy(), config.noise, config.noise_rate,
                                            dataset.spec.num_classes,
                                            numpy_rng(seed, "label-noise", cid))
            train = train.with_labels(torch.from_numpy(noisy))
        clients[cid] = ClientData(cid, train, dataset.train.subset(torch.from_numpy(te)))
    return Federation(
        dataset.spec,
        {c: clients[c] for c in train_ids},
        {c: clients[c] for c in new_ids},
        dataset.test,
    )


def partition_table(federation: Federation, max_rows: int = 20) -> str:
    """A plain-text per-client class histogram (first ``max_rows`` clients)."""
    hist = federation.class_histogram()
    new = set(federation.new_clients)
    head = "client  " + " ".join(f"{c:>5d}" for c in range(hist.shape[1])) + "   total"
    lines = [head]
    for cid, row in enumerate(hist[:max_rows]):
        tag = "*" if cid in new else " "
        lines.append(f"{cid:>5d}{tag}  " + " ".join(f"{v:>5d}" for v in row) + f"  {row.sum():>6d}")
    if len(hist) > max_rows:
        lines.append(f"... {len(hist) - max_rows} more clients")
    if new:
        lines.append("* = new client (never trains)")
    return "\n".join(lines)


def plot_partition(federation: Federation, path: Path) -> Path:
    """Stacked bars of each client's class counts: the partition at a glance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = federation.class_histogram()
    fig, ax = plt.subplots(figsize=(max(6, hist.shape[0] * 0.12), 3.5))
    bottom = np.zeros(hist.shape[0])
    cmap = plt.get_cmap("tab10" if hist.shape[1] <= 10 else "tab20")
    for c in range(hist.shape[1]):
        ax.bar(np.arange(hist.shape[0]), hist[:, c], bottom=bottom, width=0.9,
               color=cmap(c % cmap.N), label=federation.spec.classes[c])
        bottom += hist[:, c]
    ax.set_xlabel("client")
    ax.set_ylabel("train samples")
    ax.set_title(f"{federation.spec.name}: samples per client, coloured by class")
    if hist.shape[1] <= 10:
        ax.legend(fontsize=6, ncol=5, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
