"""The run configuration shared by ``pfl-sim``, ``pfl-server`` and ``pfl-export``: one TOML format.

seed = 0
rounds = 100
eval_interval = 10

[data]        dataset, root, resize, partition, num_clients, alpha, ... (PartitionConfig)
[model]       name
[algorithm]   name, and [algorithm.params] for its hyperparameters
[training]    clients_per_round | fraction, epochs, batch_size, lr, lr_decay, momentum,
weight_decay
[execution]   executor, device, precision, and the Ray settings (ExecutionConfig)

Also the round :class:`Schedule` the Coordinator follows and :func:`build_run` (the federation
and algorithm a config describes). They live in the SDK because the simulator, the server and
``pfl-export`` all read them, and dependencies point one way: server -> sdk, export -> sdk.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pflkit.sdk.algorithms.base import (
    Algorithm,
    HyperparameterError,
    LocalTraining,
    ModelFactory,
    check_algorithm,
    make_algorithm,
)
from pflkit.sdk.data.datasets import load_dataset
from pflkit.sdk.data.federation import Federation, PartitionConfig, build_federation
from pflkit.sdk.device import check_device, check_precision


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

    def lr_at(self, round_index: int) -> float:
        """The decayed learning rate of a round."""
        return self.lr * self.lr_decay**round_index


PERSONALIZE_ENGINES = ("eager", "executorch")  # executorch: docs/on-device.md


class ConfigError(ValueError):
    """The run configuration has an unknown key or a bad value."""


@dataclass(frozen=True)
class DataConfig:
    """Which dataset, where its files are, and how it is dealt to clients."""

    dataset: str = "fmnist"
    root: str | None = None  # folder with the dataset files (None: registry defaults)
    resize: int | None = None  # square side to resize to (e.g. 32 for LeNet-5)
    partition: PartitionConfig = field(default_factory=PartitionConfig)


@dataclass(frozen=True)
class TrainingConfig:
    """Round schedule and client-side SGD."""

    clients_per_round: int | None = None  # a count, or None to use fraction
    fraction: float = 0.2
    epochs: int = 5
    batch_size: int = 40
    lr: float = 0.01
    lr_decay: float = 0.99
    momentum: float = 0.9
    weight_decay: float = 1e-5

    def local(self) -> LocalTraining:
        """The client-side part."""
        return LocalTraining(self.epochs, self.batch_size, self.momentum, self.weight_decay)


@dataclass(frozen=True)
class ExecutionConfig:
    """Where client work runs; only device, precision and personalize_on move the numbers."""

    executor: str = "sequential"  # sequential | batched | ray: see server/executors.py
    device: str = "cpu"  # auto | cpu | cuda | cuda:N (auto: CUDA when present)
    precision: str = "fp32"  # fp32 | bf16 (autocast of training forward passes)
    ray_address: str | None = None  # None: start a local Ray on this machine's cores
    num_cpus: float = 1.0  # Ray: CPUs per client fit (= torch threads of a worker)
    num_gpus: float = 0.0  # Ray: GPUs per client fit (fractions share one GPU)
    workers: int | None = None  # Ray: worker processes (None: as many as the cluster fits)
    personalize_on: str = "eager"  # post-federation stage: eager | executorch (docs/on-device.md)

    def __post_init__(self) -> None:
        if self.personalize_on not in PERSONALIZE_ENGINES:
            raise ValueError(f"personalize_on must be one of {', '.join(PERSONALIZE_ENGINES)}, "
                             f"got {self.personalize_on!r}")
        check_device(self.device)
        check_precision(self.precision)
        if self.num_cpus <= 0 or self.num_gpus < 0:
            raise ValueError("num_cpus must be > 0 and num_gpus >= 0")
        if self.workers is not None and self.workers <= 0:
            raise ValueError("workers must be > 0")


@dataclass(frozen=True)
class SimConfig:
    """A whole run."""

    seed: int = 0
    rounds: int = 100
    eval_interval: int = 10  # evaluate every this many rounds (and after the last)
    checkpoint_interval: int = 10  # keep a global checkpoint every this many rounds
    data: DataConfig = field(default_factory=DataConfig)
    model: str = "fedrod_convnet"
    algorithm: str = "fedavg"
    params: dict[str, Any] = field(default_factory=dict)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)

    def schedule(self) -> Schedule:
        """The Coordinator's part."""
        t = self.training
        return Schedule(self.rounds, t.clients_per_round, t.fraction, t.lr, t.lr_decay)

    # -- TOML -------------------------------------------------------------------------------------
    def to_toml(self) -> str:
        """Canonical TOML (what ``config.toml`` in a run directory holds)."""
        top = {"seed": self.seed, "rounds": self.rounds, "eval_interval": self.eval_interval,
               "checkpoint_interval": self.checkpoint_interval}
        data = {k: v for k, v in dataclasses.asdict(self.data).items() if k != "partition"}
        sections = [
            ("", top),
            ("data", {**data, **self.data.partition.to_dict()}),
            ("model", {"name": self.model}),
            ("algorithm", {"name": self.algorithm}),
            ("algorithm.params", dict(self.params)),
            ("training", dataclasses.asdict(self.training)),
            ("execution", dataclasses.asdict(self.execution)),
        ]
        out: list[str] = []
        for title, values in sections:
            if title:
                out.append(f"\n[{title}]")
            out.extend(f"{k} = {_toml_value(v)}" for k, v in values.items() if v is not None)
        return "\n".join(out).lstrip() + "\n"

    @classmethod
    def from_mapping(cls, raw: dict[str, Any]) -> SimConfig:
        """Build from parsed TOML; unknown keys are errors that name the key."""
        raw = dict(raw)
        data_raw = dict(raw.pop("data", {}))
        model_raw = dict(raw.pop("model", {}))
        algo_raw = dict(raw.pop("algorithm", {}))
        training_raw = dict(raw.pop("training", {}))
        execution_raw = dict(raw.pop("execution", {}))
        part_fields = {f.name for f in dataclasses.fields(PartitionConfig)}
        part_raw = {k: data_raw.pop(k) for k in list(data_raw) if k in part_fields}
        part = _build(PartitionConfig, part_raw, "data")
        data = _build(DataConfig, {**data_raw, "partition": part}, "data")
        model = model_raw.pop("name", cls.model)
        _no_extra(model_raw, "model")
        algorithm = algo_raw.pop("name", cls.algorithm)
        params = dict(algo_raw.pop("params", {}))
        _no_extra(algo_raw, "algorithm")
        training = _build(TrainingConfig, training_raw, "training")
        execution = _build(ExecutionConfig, execution_raw, "execution")
        return _build(cls, {**raw, "data": data, "model": model, "algorithm": algorithm,
                            "params": params, "training": training, "execution": execution},
                      "top level")

    @classmethod
    def load(cls, path: Path) -> SimConfig:
        """Read a TOML file."""
        try:
            raw = tomllib.loads(Path(path).read_text())
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{path}: not valid TOML ({err})") from err
        return cls.from_mapping(raw)

    def replace(self, **changes: Any) -> SimConfig:
        """A copy with some top-level fields changed."""
        return dataclasses.replace(self, **changes)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ConfigError(f"cannot write {value!r} to TOML")


def _no_extra(raw: dict[str, Any], where: str) -> None:
    if raw:
        raise ConfigError(f"[{where}]: unknown key(s) {', '.join(sorted(raw))}")


def _build(cls: type, raw: dict[str, Any], where: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    _no_extra({k: v for k, v in raw.items() if k not in names}, where)
    try:
        return cls(**raw)
    except (TypeError, ValueError, HyperparameterError) as err:
        raise ConfigError(f"[{where}]: {err}") from err


def build_run(config: SimConfig) -> tuple[Federation, Algorithm]:
    """The federation and the algorithm a config describes (deterministic in the seed)."""
    check_algorithm(config.algorithm, config.params)  # fail fast, before loading data
    size = (config.data.resize, config.data.resize) if config.data.resize else None
    dataset = load_dataset(config.data.dataset, config.data.root, size, seed=config.seed)
    federation = build_federation(dataset, config.data.partition, config.seed)
    model = ModelFactory(config.model, dataset.spec.input_shape, dataset.spec.num_classes)
    algorithm = make_algorithm(config.algorithm, model, config.training.local(), config.params)
    return federation, algorithm
