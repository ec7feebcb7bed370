"""The run configuration shared by ``pfl-sim``, ``pfl-server`` and ``pfl-export``: one TOML schema.

seed = 0
rounds = 100
eval_interval = 10
checkpoint_interval = 10

[data]        dataset, root, resize, and the partition: kind, num_clients, alpha, ...
[model]       name
[algorithm]   name, and [algorithm.params] for its hyperparameters
[training]    clients_per_round | fraction, epochs, batch_size, lr, lr_decay, momentum,
              weight_decay
[execution]   executor, device, precision, and the Ray settings (ExecutionConfig)

The schema is typed (pydantic dataclasses, strict: see sdk/config_types.py) and the whole
config is validated before anything starts, including the model, dataset and algorithm names
(built-in, ``package.module:attr`` or an entry point) and the algorithm's hyperparameters: a
bad config is one :class:`ConfigError` line naming the key, and no run directory, database row
or client work exists yet. ``--set KEY=VALUE`` overrides address the same dotted TOML keys
(sdk/config_toml.py).

Also the round :class:`Schedule` the Coordinator follows. They live in the SDK because the
simulator, the server and ``pfl-export`` all read them: server -> sdk, export -> sdk.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pydantic
from pydantic import AfterValidator, Strict, TypeAdapter, ValidationError

from pflkit.sdk.algorithms.base import LocalTraining, algorithm_class, check_algorithm
from pflkit.sdk.config_toml import apply_overrides, dump_toml, parse_toml, read_toml
from pflkit.sdk.config_types import (
    MAX_CLIENTS,
    STRICT_CONFIG,
    BatchSize,
    Epochs,
    Fraction,
    LearningRate,
    Momentum,
    Name,
    Rounds,
    Seed,
    Text,
    WeightDecay,
    closest,
    describe,
    fields_at,
    in_range,
)
from pflkit.sdk.config_types import ConfigError as ConfigError  # re-exported: callers catch it
from pflkit.sdk.data.datasets import dataset_source
from pflkit.sdk.data.federation import PartitionConfig
from pflkit.sdk.device import check_device, check_precision
from pflkit.sdk.lr_schedule import Decay, LearningRateSchedule
from pflkit.sdk.models import model_builder
from pflkit.sdk.registry import OWN_CONFIG, ExtensionError, ImportPolicy


@dataclass(frozen=True)
class Schedule:
    """Round-level settings: how many rounds, who takes part, the learning-rate decay."""

    rounds: int = 100
    clients_per_round: int | None = None  # a count; or use fraction
    fraction: float = 0.2  # share of clients sampled when clients_per_round is None
    lr: float = 0.01  # round-0 client learning rate
    lr_decay: float = 0.99  # lr of round r = lr * lr_decay ** r

    def sample_size(self, num_clients: int) -> int:
        """Clients per round for a federation of ``num_clients``."""
        if self.clients_per_round is not None:
            k = self.clients_per_round
        else:
            k = max(1, math.floor(self.fraction * num_clients + 0.5))
        if not 1 <= k <= num_clients:
            raise ValueError(f"cannot sample {k} of {num_clients} clients per round")
        return k

    @property
    def lr_schedule(self) -> LearningRateSchedule:
        """The clients' learning-rate schedule (the object the server sends to devices)."""
        return LearningRateSchedule(self.lr, self.lr_decay)

    def lr_at(self, round_index: int) -> float:
        """The decayed learning rate of a round."""
        return self.lr_schedule.at(round_index)


PERSONALIZE_ENGINES = ("eager", "executorch")  # executorch: docs/on-device.md


_schema = pydantic.dataclasses.dataclass(frozen=True, config=STRICT_CONFIG)


@_schema
class DataConfig:
    """Which dataset, where its files are, and how it is dealt to clients."""

    dataset: Name = "fmnist"  # built-in name, package.module:attr, or an entry point
    root: Text | None = None  # folder with the dataset files (None: the dataset's defaults)
    # square side to resize images to (e.g. 32 for LeNet-5); 512 is the most: 3 x 512 x 512
    # inputs already give a two-layer MLP 157 M weights
    resize: Annotated[int, Strict(), in_range(1, 512)] | None = None
    partition: PartitionConfig = field(default_factory=PartitionConfig)


@_schema
class TrainingConfig:
    """Round schedule and client-side SGD."""

    # a count (at most data.num_clients), or None to use fraction
    clients_per_round: Annotated[int, Strict(), in_range(1, MAX_CLIENTS)] | None = None
    fraction: Fraction = 0.2
    epochs: Epochs = 5
    batch_size: BatchSize = 40
    lr: LearningRate = 0.01
    lr_decay: Decay = 0.99
    momentum: Momentum = 0.9
    weight_decay: WeightDecay = 1e-5

    def local(self) -> LocalTraining:
        """The client-side part."""
        return LocalTraining(self.epochs, self.batch_size, self.momentum, self.weight_decay)


def _precision(name: str) -> str:
    check_precision(name)
    return name


def _engine(name: str) -> str:
    if name not in PERSONALIZE_ENGINES:
        raise ValueError(f"personalize_on must be one of {', '.join(PERSONALIZE_ENGINES)}, "
                         f"got {name!r}")
    return name


@_schema
class ExecutionConfig:
    """Where client work runs; only device, precision and personalize_on move the numbers."""

    executor: Name = "sequential"  # sequential | batched | ray: see server/executors.py
    device: Annotated[str, Strict(), AfterValidator(check_device)] = "cpu"  # auto | cpu | cuda:N
    precision: Annotated[str, Strict(), AfterValidator(_precision)] = "fp32"  # fp32 | bf16
    ray_address: Text | None = None  # None: start a local Ray on this machine's cores
    # Ray: seconds ray_address may take to accept a connection before the run is refused
    ray_connect_timeout: Annotated[float, Strict(), in_range(0.0, 3600.0, open_low=True)] = 10.0
    # Ray: CPUs per client fit (= torch threads of a worker)
    num_cpus: Annotated[float, Strict(), in_range(0.0, 1024.0, open_low=True)] = 1.0
    # Ray: GPUs per client fit (fractions share one GPU)
    num_gpus: Annotated[float, Strict(), in_range(0.0, 64.0)] = 0.0
    # Ray: worker processes (None: as many as fit)
    workers: Annotated[int, Strict(), in_range(1, 1024)] | None = None
    # the post-federation stage: eager | executorch (docs/on-device.md)
    personalize_on: Annotated[str, Strict(), AfterValidator(_engine)] = "eager"


@_schema
class SimConfig:
    """A whole run. Constructing one validates it, names and hyperparameters included."""

    seed: Seed = 0
    rounds: Rounds = 100
    eval_interval: Rounds = 10  # evaluate every this many rounds (and after the last)
    checkpoint_interval: Rounds = 10  # keep a global checkpoint every this many rounds
    data: DataConfig = field(default_factory=DataConfig)
    model: Name = "fedrod_convnet"  # built-in name, package.module:attr, or an entry point
    algorithm: Name = "fedavg"  # idem
    params: dict[str, Any] = field(default_factory=dict)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)

    def __post_init__(self) -> None:
        try:
            self.schedule().lr_schedule.check_until(self.rounds)
        except ValueError as err:
            raise _KeyedError("training.lr_decay", str(err)) from None
        part, per_round = self.data.partition, self.training.clients_per_round
        trainers = part.num_clients - part.num_new_clients
        if per_round is not None and per_round > trainers:
            raise _KeyedError("training.clients_per_round",
                              f"{per_round} is more than the {trainers} training clients")
        for key, check in (("model.name", lambda: model_builder(self.model)),
                           ("data.dataset", lambda: dataset_source(self.data.dataset)),
                           ("algorithm.name", lambda: algorithm_class(self.algorithm))):
            try:
                check()
            except ExtensionError as err:
                raise _KeyedError(key, str(err)) from None
        try:
            check_algorithm(self.algorithm, self.params)
        except ValueError as err:
            raise _KeyedError("algorithm.params", str(err)) from None

    def schedule(self) -> Schedule:
        """The Coordinator's part."""
        t = self.training
        return Schedule(self.rounds, t.clients_per_round, t.fraction, t.lr, t.lr_decay)

    # -- TOML -------------------------------------------------------------------------------------
    def to_mapping(self) -> dict[str, Any]:
        """The TOML layout as nested dicts (None values left out)."""
        data = {"dataset": self.data.dataset, "root": self.data.root,
                "resize": self.data.resize, **dataclasses.asdict(self.data.partition)}
        out = {"seed": self.seed, "rounds": self.rounds, "eval_interval": self.eval_interval,
               "checkpoint_interval": self.checkpoint_interval, "data": data,
               "model": {"name": self.model},
               "algorithm": {"name": self.algorithm, "params": dict(self.params)},
               "training": dataclasses.asdict(self.training),
               "execution": dataclasses.asdict(self.execution)}
        return _drop_none(out)

    def to_toml(self) -> str:
        """Canonical TOML (what ``config.toml`` in a run directory holds)."""
        return dump_toml(self.to_mapping())

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], imports: ImportPolicy = OWN_CONFIG
                     ) -> SimConfig:
        """Validate parsed TOML; every error is a :class:`ConfigError` naming the key.

        ``imports``: the import paths this process may import for the config's names, checked
        before anything is imported (pfl-server passes its operator's; the default trusts
        the config, as pfl-sim and pfl-export do with their user's own).
        """
        layout = _python_layout(raw)
        _check_imports(layout, imports)
        try:
            return _ADAPTER.validate_python(layout)
        except ValidationError as err:
            raise ConfigError(describe(err, _toml_key, _toml_keys)) from None

    @classmethod
    def from_toml(cls, text: str, source: str = "config", imports: ImportPolicy = OWN_CONFIG
                  ) -> SimConfig:
        """Parse and validate TOML text (``source`` names it in a syntax error); never empty."""
        return cls.from_mapping(_not_empty(parse_toml(text, source), source), imports)

    @classmethod
    def load(cls, path: Path, overrides: Sequence[str] = (),
             imports: ImportPolicy = OWN_CONFIG) -> SimConfig:
        """Read a TOML file, apply ``KEY=VALUE`` overrides, validate the result (never empty)."""
        raw = _not_empty(apply_overrides(read_toml(Path(path)), overrides), str(path))
        return cls.from_mapping(raw, imports)

    def replace(self, **changes: Any) -> SimConfig:
        """A validated copy with some top-level fields changed."""
        return dataclasses.replace(self, **changes)


class _KeyedError(ValueError):
    """A cross-field check that fails, with the TOML key to blame."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")


_ADAPTER = TypeAdapter(SimConfig)
_PARTITION_KEYS = {f.name for f in dataclasses.fields(PartitionConfig)}
_SECTIONS = {"data", "model", "algorithm", "training", "execution"}


def _python_layout(raw: Mapping[str, Any]) -> dict[str, Any]:
    """TOML sections -> SimConfig's fields ([data]'s partition keys, [model] name, ...)."""
    out = {k: v for k, v in raw.items() if k not in _SECTIONS}
    for section in _SECTIONS & set(raw):
        if not isinstance(raw[section], dict):
            raise ConfigError(f"{section}: must be a [{section}] table, got {raw[section]!r}")
    data = dict(raw.get("data", {}))
    if "partition" in data:
        raise ConfigError("data.partition: unknown key (the partition keys kind, num_clients, "
                          "... go directly in [data])")
    partition = {k: data.pop(k) for k in list(data) if k in _PARTITION_KEYS}
    if "data" in raw:
        out["data"] = {**data, "partition": partition}
    for section, allowed in (("model", {"name"}), ("algorithm", {"name", "params"})):
        table = dict(raw.get(section, {}))
        extra = sorted(set(table) - allowed)
        if extra:
            guess = closest(extra[0], sorted(allowed))
            hint = f"did you mean {section}.{guess}?" if guess else \
                f"known: {', '.join(sorted(allowed))}"
            raise ConfigError(f"{section}.{extra[0]}: unknown key ({hint})")
        if "name" in table:
            out[section] = table["name"]
    if "params" in raw.get("algorithm", {}):
        out["params"] = raw["algorithm"]["params"]
    for section in ("training", "execution"):
        if section in raw:
            out[section] = raw[section]
    return out


def _check_imports(layout: Mapping[str, Any], imports: ImportPolicy) -> None:
    """Refuse an import path ``imports`` does not allow, before validation imports it."""
    data = layout.get("data")
    for key, kind, ref in (("model.name", "model", layout.get("model")),
                           ("data.dataset", "dataset",
                            data.get("dataset") if isinstance(data, dict) else None),
                           ("algorithm.name", "algorithm", layout.get("algorithm"))):
        if isinstance(ref, str):
            try:
                imports.check(kind, ref)
            except ExtensionError as err:
                raise ConfigError(f"{key}: {err}") from None


def _not_empty(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """Refuse a config without keys: the defaults alone are a 100-round run nobody asked for."""
    if not raw:
        raise ConfigError(f"{source}: has no keys (an empty run config would start a "
                          f"{SimConfig.rounds}-round run of the defaults)")
    return raw


def _toml_keys(table: Sequence[str]) -> list[str]:
    """The keys the run config allows in a TOML table (pydantic's location of it)."""
    keys = [k for k in fields_at(SimConfig)(table) if k not in ("params", "partition")]
    return [*keys, *sorted(_PARTITION_KEYS)] if list(table) == ["data"] else keys


def _toml_key(loc: Sequence[str]) -> str:
    """A pydantic location in SimConfig -> the dotted TOML key the user wrote."""
    parts = list(loc)
    if parts[:2] == ["data", "partition"]:
        parts = ["data", *parts[2:]]
    elif parts[:1] in (["model"], ["algorithm"]):
        parts = [parts[0], "name"]
    elif parts[:1] == ["params"]:
        parts = ["algorithm", *parts]
    return ".".join(parts)


def _drop_none(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _drop_none(v) if isinstance(v, dict) else v for k, v in mapping.items()
            if v is not None}
