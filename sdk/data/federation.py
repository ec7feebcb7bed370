"""From a dataset and a partition recipe to the clients' data: the simulator's data side.

A :class:`PartitionConfig` is the whole recipe (kind, clients, alpha, test split, new
clients, label noise); with the run seed it fixes every client's train and test rows. The
kinds iid, shards and dirichlet deal rows by label (sdk/data/partition.py); natural keeps the
dataset's own users as the clients (sdk/data/natural.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pydantic
import torch
from pydantic import Strict

from pflkit.sdk.config_types import MAX_CLIENTS, STRICT_CONFIG, ConfigError, Fraction, in_range
from pflkit.sdk.data import partition
from pflkit.sdk.data.natural import NaturalDeal, Users, natural
from pflkit.sdk.data.noise import apply_label_noise
from pflkit.sdk.data.spec import Dataset, DatasetSpec
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.seeding import numpy_rng


@pydantic.dataclasses.dataclass(frozen=True, config=STRICT_CONFIG)
class PartitionConfig:
    """How the training set is dealt to clients (the partition keys of a config's [data])."""

    # shards: pathological non-IID; natural: the dataset's users are the clients
    kind: Literal["iid", "shards", "dirichlet", "natural"] = "dirichlet"
    # natural: the most users kept (a seeded draw when more qualify)
    num_clients: Annotated[int, Strict(), in_range(1, MAX_CLIENTS)] = 100
    # Dirichlet concentration (kind = dirichlet); 1e6 is already an IID deal
    alpha: Annotated[float, Strict(), in_range(0.0, 1e6, open_low=True)] = 0.3
    shards_per_client: Annotated[int, Strict(), in_range(1, 1000)] = 2  # kind = shards
    # smallest client allowed (dirichlet redraws; natural drops smaller users)
    min_size: Annotated[int, Strict(), in_range(0, 1_000_000)] = 10
    # share of each client's rows kept as its own test split
    test_fraction: Annotated[float, Strict(), in_range(0.0, 1.0, open_high=True)] = 0.0
    # clients that never train (zero-shot / fine-tuning)
    num_new_clients: Annotated[int, Strict(), in_range(0, MAX_CLIENTS - 1)] = 0
    noise: Literal["pair", "symmetric"] | None = None  # label noise on clients' train labels
    noise_rate: Fraction = 0.0

    def __post_init__(self) -> None:
        if self.num_new_clients >= self.num_clients:
            raise ValueError(f"num_new_clients = {self.num_new_clients} leaves no client to "
                             f"train (num_clients = {self.num_clients})")
        if self.noise is None and self.noise_rate > 0:  # a rate alone would add no noise
            raise ValueError(f"noise_rate = {self.noise_rate} needs noise = \"pair\" or "
                             f"\"symmetric\" (the kind of label noise)")

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
    users: Users | None = None  # natural partition: the dataset user each client is

    @property
    def all_clients(self) -> dict[int, ClientData]:
        """Training and new clients together, by id."""
        return {**self.clients, **self.new_clients}

    def class_histogram(self, first: int | None = None) -> np.ndarray:
        """(num_clients, num_classes) train counts, rows ordered by client id.

        ``first``: only the first that many clients' rows, as the table and the plot show
        them (all of them: 100,000 users of 10,000 classes would be 8 GB).
        """
        every = self.all_clients
        c = self.spec.num_classes
        rows = [every[k].class_counts(c).cpu().numpy() for k in sorted(every)[:first]]
        return np.stack(rows) if rows else np.zeros((0, c), dtype=np.int64)


@dataclass(frozen=True)
class Partition:
    """Which dataset rows each client holds: the seeded deal, stored in a run directory.

    Row indices point into the dataset's train split. ``labels`` holds the train labels of
    clients whose labels label noise changed (the noisy ones are what they train on).
    """

    train: dict[int, np.ndarray]  # client id -> train rows
    test: dict[int, np.ndarray]  # client id -> rows kept as the client's own test split
    labels: dict[int, np.ndarray]  # client id -> noisy train labels (label noise only)
    new_clients: tuple[int, ...]  # clients that never train
    users: Users | None = None  # natural partition: the dataset user each client is

    def client(self, dataset: Dataset, client_id: int) -> ClientData:
        """One client's data, without building anyone else's."""
        train = dataset.train.subset(torch.from_numpy(self.train[client_id]))
        if client_id in self.labels:
            train = train.with_labels(torch.from_numpy(self.labels[client_id]))
        return ClientData(client_id, train,
                          dataset.train.subset(torch.from_numpy(self.test[client_id])))

    def federation(self, dataset: Dataset) -> Federation:
        """Every client's data."""
        clients = {cid: self.client(dataset, cid) for cid in sorted(self.train)}
        new = set(self.new_clients)
        return Federation(dataset.spec, {c: d for c, d in clients.items() if c not in new},
                          {c: clients[c] for c in self.new_clients}, dataset.test, self.users)

    def to_state(self) -> dict[str, torch.Tensor]:
        """Int64 tensors for safetensors: three per table (``train``, ``test``, ``labels``).

        ``<table>`` holds every client's rows end to end, ``<table>.clients`` and
        ``<table>.sizes`` say whose they are. Three tensors a table, not two per client:
        10,000 clients' 20,000 small tensors took safetensors 6 s to write.
        """
        out = {"new_clients": torch.tensor(self.new_clients, dtype=torch.int64),
               **(self.users.to_state() if self.users else {})}
        for name, table in (("train", self.train), ("test", self.test), ("labels", self.labels)):
            ids = sorted(table)
            rows = [table[c] for c in ids]
            out[name] = torch.from_numpy(np.concatenate(rows or [np.empty(0)]).astype(np.int64))
            out[f"{name}.clients"] = torch.tensor(ids, dtype=torch.int64)
            out[f"{name}.sizes"] = torch.tensor([len(r) for r in rows], dtype=torch.int64)
        return out

    @classmethod
    def from_state(cls, state: dict[str, torch.Tensor]) -> Partition:
        """Inverse of :meth:`to_state`; also reads the older ``<table>.<client id>`` layout."""
        tables: dict[str, dict[int, np.ndarray]] = {"train": {}, "test": {}, "labels": {}}
        for name, table in tables.items():
            if len(state.get(f"{name}.sizes", ())):
                cuts = np.cumsum(state[f"{name}.sizes"].numpy())[:-1]
                table.update(zip(state[f"{name}.clients"].tolist(),
                                 np.split(state[name].numpy(), cuts), strict=True))
        for key, value in state.items():
            name, _, cid = key.partition(".")
            if name in tables and cid.isdigit():
                tables[name][int(cid)] = value.numpy()
        return cls(tables["train"], tables["test"], tables["labels"],
                   tuple(int(c) for c in state["new_clients"].tolist()), Users.from_state(state))


def _natural(users: np.ndarray | None, config: PartitionConfig, seed: int) -> NaturalDeal:
    if users is None:
        raise ConfigError('data.kind: "natural" needs a dataset that names the user of each '
                          "train row (Dataset users=..., or the folder dataset's train_users.npy "
                          "or 'users' tensor); this one has none")
    got = natural(users, config.min_size, config.num_clients, config.test_fraction,
                  config.num_new_clients, seed)
    if config.num_new_clients >= len(got.train):
        raise ConfigError(f"data.num_new_clients: {config.num_new_clients} leaves no user to "
                          f"train ({got.users.describe()})")
    return got


def deal(labels: np.ndarray, num_classes: int, config: PartitionConfig, seed: int,
         users: np.ndarray | None = None) -> Partition:
    """Deal train rows with ``labels`` (and ``users``, for natural) to clients, seeded."""
    who: Users | None = None
    if config.kind == "natural":  # every draw about a user hangs on its id, not its client id
        got = _natural(users, config, seed)
        train, test, who = dict(enumerate(got.train)), dict(enumerate(got.test)), got.users
        new_ids = got.new_clients
    else:
        rng = numpy_rng(seed, "partition", config.kind)
        if config.kind == "iid":
            parts = partition.iid(labels, config.num_clients, rng)
        elif config.kind == "shards":
            parts = partition.shards(labels, config.num_clients, rng, config.shards_per_client)
        else:
            parts = partition.dirichlet(labels, config.num_clients, config.alpha, rng,
                                        config.min_size)
        train, test = {}, {}
        for cid, rows in enumerate(parts):
            train[cid], test[cid] = partition.train_test_split(
                rows, config.test_fraction, numpy_rng(seed, "client-split", cid))
        _, new_ids = partition.split_new_clients(len(train), config.num_new_clients,
                                                 numpy_rng(seed, "new-clients"))
    noisy = {}
    if config.noise is not None and config.noise_rate > 0:
        for cid, rows in train.items():
            of = ("user", int(who.ids[cid])) if who else (cid,)
            noisy[cid] = apply_label_noise(labels[rows], config.noise, config.noise_rate,
                                           num_classes, numpy_rng(seed, "label-noise", *of))
    return Partition(train, test, noisy, tuple(int(c) for c in new_ids), who)


def deal_dataset(dataset: Dataset, config: PartitionConfig, seed: int) -> Partition:
    """Deal ``dataset.train`` (with its users, if it names them) as ``config`` says."""
    users = None if dataset.users is None else dataset.users.numpy()
    return deal(dataset.train.y.numpy(), dataset.spec.num_classes, config, seed, users)


def build_federation(dataset: Dataset, config: PartitionConfig, seed: int) -> Federation:
    """Deal ``dataset.train`` to clients as ``config`` says, seeded by ``seed``."""
    return deal_dataset(dataset, config, seed).federation(dataset)


def partition_table(federation: Federation, max_rows: int = 20) -> str:
    """A plain-text per-client class histogram (first ``max_rows`` clients).

    A natural partition adds the user id of each client, a first line on the users left out
    and a last one on where the dataset's rows went.
    """
    hist, clients = federation.class_histogram(max_rows), len(federation.all_clients)
    new = set(federation.new_clients)
    users = federation.users
    wide = max([12, *(len(str(u)) for u in users.ids[:max_rows])]) if users else 0  # int64: 20
    head = "client  " + (f"{'user':>{wide}}  " if users else "") + \
        " ".join(f"{c:>5d}" for c in range(hist.shape[1])) + "   total"
    lines = [users.describe()] if users else []
    lines.append(head)
    for cid, row in enumerate(hist):
        tag = "*" if cid in new else " "
        user = f"{users.ids[cid]:>{wide}d}  " if users else ""
        lines.append(f"{cid:>5d}{tag}  {user}" + " ".join(f"{v:>5d}" for v in row) +
                     f"  {row.sum():>6d}")
    if clients > max_rows:
        lines.append(f"... {clients - max_rows} more clients")
    if new:
        lines.append("* = new client (never trains)")
    if users and users.rows:
        lines.append(users.rows.describe())
    return "\n".join(lines)


def plot_partition(federation: Federation, path: Path, max_bars: int = 200) -> Path:
    """Stacked bars of each client's class counts (the first ``max_bars`` clients).

    The segments there are (a class a client lacks draws nothing) are one collection: a bar
    call per class took 30 s at 2,000 classes (a patch per segment still 11 s), and a
    dataset may have 100,000.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    hist = federation.class_histogram(max_bars)  # 10,000 users: a figure 1,200 inches wide
    clients = len(federation.all_clients)
    fig, ax = plt.subplots(figsize=(max(6, hist.shape[0] * 0.12), 3.5))
    cmap = plt.get_cmap("tab10" if hist.shape[1] <= 10 else "tab20")
    client, c = np.nonzero(hist)
    low = (np.cumsum(hist, axis=1) - hist)[client, c]  # the classes before c, stacked
    high, left, right = low + hist[client, c], client - 0.45, client + 0.45
    corners = [np.c_[left, low], np.c_[left, high], np.c_[right, high], np.c_[right, low]]
    ax.add_collection(PolyCollection(np.stack(corners, axis=1), facecolors=cmap(c % cmap.N),
                                     edgecolors="none"))
    ax.set_xlim(-0.5, hist.shape[0] - 0.5)
    ax.set_ylim(0, max(1, int(hist.sum(axis=1).max(initial=0))) * 1.05)
    shown = f" (first {len(hist)} of {clients})" if len(hist) < clients else ""
    ax.set_xlabel("client = a dataset user (partition.txt names it)" if federation.users
                  else "client")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # no client 0.5
    ax.set_ylabel("train samples")
    ax.set_title(f"{federation.spec.name}: samples per client{shown}, coloured by class")
    if hist.shape[1] <= 10:
        ax.legend([Patch(color=cmap(k)) for k in range(hist.shape[1])], federation.spec.classes,
                  fontsize=6, ncol=5, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
