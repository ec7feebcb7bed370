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
[aggregation] rule, trim_fraction, clip_norm (sdk/aggregation_config.py)
[execution]   executor, device, precision, and the Ray settings (sdk/execution_config.py)

The Python layout is the TOML layout: each section is one typed class, and each setting is
declared once, by the component that uses it (``[training]`` *is* the algorithms'
:class:`LocalTraining`, the Coordinator's :class:`Sampling` and the devices'
:class:`LearningRateSchedule` settings; ``[data]`` *is* the :class:`PartitionConfig`). So
loading is one strict validation (pydantic dataclasses: see sdk/config_types.py) whose error
locations are the TOML keys, and ``--set KEY=VALUE`` overrides address the same dotted keys
(sdk/config_toml.py). The whole config is validated before anything starts, including the
model, dataset, algorithm and executor names (built-in, ``package.module:attr`` or an entry
point) and the algorithm's hyperparameters: a bad config is one :class:`ConfigError` line
naming the key, and no run directory, database row or client work exists yet.

Also re-exported: the round :class:`Schedule` the Coordinator follows (sdk/round_schedule.py).
They live in the SDK because the simulator, the server and ``pfl-export`` all read them:
server -> sdk, export -> sdk.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any

import pydantic
from pydantic import Strict, TypeAdapter, ValidationError

from pflkit.sdk.aggregation_config import AggregationConfig as AggregationConfig
from pflkit.sdk.algorithms.base import LocalTraining, algorithm_class, check_algorithm
from pflkit.sdk.config_toml import apply_overrides, dump_toml, parse_toml, read_toml
from pflkit.sdk.config_types import (
    STRICT_CONFIG,
    LearningRate,
    Name,
    PathText,
    Rounds,
    Seed,
    describe,
    fields_at,
    in_range,
    plain_name,
    refuse_unused,
    shown,
)
from pflkit.sdk.config_types import ConfigError as ConfigError  # re-exported: callers catch it
from pflkit.sdk.data.datasets import dataset_source
from pflkit.sdk.data.federation import PartitionConfig
from pflkit.sdk.data.partition import KIND_SETTINGS
from pflkit.sdk.execution_config import ExecutionConfig as ExecutionConfig
from pflkit.sdk.lr_schedule import Decay, LearningRateSchedule
from pflkit.sdk.models import model_builder
from pflkit.sdk.registry import OWN_CONFIG, ExtensionError, ImportPolicy
from pflkit.sdk.round_schedule import Sampling as Sampling
from pflkit.sdk.round_schedule import Schedule as Schedule

_schema = pydantic.dataclasses.dataclass(frozen=True, config=STRICT_CONFIG)
_DEFAULT_LR = LearningRateSchedule()  # [training]'s lr and lr_decay default to the schedule's


@pydantic.dataclasses.dataclass(frozen=True, config=STRICT_CONFIG, kw_only=True)
class DataConfig(PartitionConfig):
    """Which dataset, where its files are, and how it is dealt to clients (the partition keys)."""

    dataset: Name = "fmnist"  # built-in name, package.module:attr, or an entry point
    root: PathText | None = None  # folder with the dataset files (None: the dataset's defaults)
    # square side to resize images to (e.g. 32 for LeNet-5); 512 is the most: 3 x 512 x 512
    # inputs already give a two-layer MLP 157 M weights
    resize: Annotated[int, Strict(), in_range(1, 512)] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        refuse_unused(self, {key: f'kind = "{self.kind}" (it applies to kind = {" | ".join(kinds)})'
                             for key, kinds in KIND_SETTINGS.items() if self.kind not in kinds})


@_schema
class ModelConfig:
    """The architecture (sdk/models.py)."""

    name: Name = "fedrod_convnet"  # built-in name, package.module:attr, or an entry point


@_schema
class AlgorithmConfig:
    """The method and its hyperparameters (checked against the method's own ``Params``)."""

    name: Name = "fedavg"  # built-in name, package.module:attr, or an entry point
    params: dict[str, Any] = field(default_factory=dict)


@pydantic.dataclasses.dataclass(frozen=True, config=STRICT_CONFIG, kw_only=True)
class TrainingConfig(LocalTraining, Sampling):
    """Client-side SGD (:class:`LocalTraining`), the round's sample, the learning rate."""

    lr: LearningRate = _DEFAULT_LR.lr  # round 0's client learning rate
    lr_decay: Decay = _DEFAULT_LR.decay  # the rate of round r is lr * lr_decay ** r

    def local(self) -> LocalTraining:
        """The algorithms' part (what a device's task carries)."""
        return LocalTraining(**{f.name: getattr(self, f.name)
                                for f in dataclasses.fields(LocalTraining)})

    @property
    def lr_schedule(self) -> LearningRateSchedule:
        """The clients' learning-rate schedule (the object the server sends to devices)."""
        return LearningRateSchedule(self.lr, self.lr_decay)


@_schema
class SimConfig:
    """A whole run. Constructing one validates it, names and hyperparameters included."""

    seed: Seed = 0
    rounds: Rounds = 100
    eval_interval: Rounds = 10  # evaluate every this many rounds (and after the last)
    checkpoint_interval: Rounds = 10  # keep a global checkpoint every this many rounds
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    aggregation: AggregationConfig = field(default_factory=AggregationConfig)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)

    def __post_init__(self) -> None:
        try:
            self.training.lr_schedule.check_until(self.rounds)
        except ValueError as err:
            raise _KeyedError("training.lr_decay", str(err)) from None
        data, per_round = self.data, self.training.clients_per_round
        trainers = data.num_clients - data.num_new_clients
        if per_round is not None and per_round > trainers:
            raise _KeyedError("training.clients_per_round",
                              f"{per_round} is more than the {trainers} training clients")
        for key, check in (("model.name", lambda: model_builder(self.model.name)),
                           ("data.dataset", lambda: dataset_source(self.data.dataset)),
                           ("algorithm.name", lambda: algorithm_class(self.algorithm.name))):
            try:
                check()
            except ExtensionError as err:
                raise _KeyedError(key, str(err)) from None
        try:
            check_algorithm(self.algorithm.name, self.algorithm.params, self.training.local(),
                            self.training.lr)
        except ValueError as err:
            raise _KeyedError("algorithm.params", str(err)) from None

    def schedule(self) -> Schedule:
        """The Coordinator's part."""
        return Schedule(self.rounds, self.training, self.training.lr_schedule)

    # -- TOML -------------------------------------------------------------------------------------
    def to_mapping(self) -> dict[str, Any]:
        """The TOML layout as nested dicts (None values left out)."""
        return _drop_none(dataclasses.asdict(self))

    def to_toml(self) -> str:
        """Canonical TOML (what ``config.toml`` in a run directory holds)."""
        return dump_toml(self.to_mapping())

    def computed_part(self) -> SimConfig:
        """The config less where it runs ([execution]) and where its data lies (data.root).

        What a run's numbers follow: a resumed run continues under exactly this, anywhere.
        """
        return self.replace(data=dataclasses.replace(self.data, root=None),
                            execution=ExecutionConfig())

    def changes_from(self, before: SimConfig) -> list[str]:
        """Each setting that differs from ``before`` as ``key: old -> new``, sorted by key."""
        old, new = _flat(before.to_mapping()), _flat(self.to_mapping())
        return [f"{key}: {_setting(old.get(key))} -> {_setting(new.get(key))}"
                for key in sorted(old.keys() | new.keys()) if old.get(key) != new.get(key)]

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], imports: ImportPolicy = OWN_CONFIG
                     ) -> SimConfig:
        """Validate parsed TOML; every error is a :class:`ConfigError` naming the key.

        ``imports``: the import paths this process may import for the config's names, checked
        before anything is imported (pfl-server passes its operator's; the default trusts
        the config, as pfl-sim and pfl-export do with their user's own).
        """
        _check_imports(raw, imports)
        try:
            return _ADAPTER.validate_python(dict(raw))
        except ValidationError as err:
            raise ConfigError(describe(err, known=fields_at(SimConfig))) from None

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


def _check_imports(raw: Mapping[str, Any], imports: ImportPolicy) -> None:
    """Refuse an import path ``imports`` does not allow, before validation imports it."""
    for key, kind in (("model.name", "model"), ("data.dataset", "dataset"),
                      ("algorithm.name", "algorithm")):
        section, name = key.split(".")
        table = raw.get(section)
        ref = table.get(name) if isinstance(table, dict) else None
        if isinstance(ref, str) and plain_name(ref):  # else validation refuses it
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


def _drop_none(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _drop_none(v) if isinstance(v, dict) else v for k, v in mapping.items()
            if v is not None}


def _flat(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables as ``{dotted key: value}``."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def _setting(value: Any) -> str:
    """A setting's value as an error shows it (None: the key is not set)."""
    return "unset" if value is None else shown(value)
