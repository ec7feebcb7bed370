"""What a client is told to train: its part of the run config, typed like the run config.

The server derives it from the run's :class:`~pflkit.sdk.run_config.SimConfig` and the dataset
spec (:meth:`TaskConfig.of`) and sends it with every task as JSON; ``FederatedClient``
validates what arrives with the same strict types (:meth:`TaskConfig.from_wire`: a malformed
task is one :class:`~pflkit.sdk.run_config.ConfigError` line naming the key, and an import path
the device was not allowed to import is refused before any import) and builds the algorithm
from it exactly as the simulator does (:meth:`TaskConfig.build`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Annotated, Any

import pydantic
from pydantic import Field, Strict, TypeAdapter, ValidationError

from pflkit.sdk.algorithms.base import Algorithm, LocalTraining, RoundContext, check_algorithm
from pflkit.sdk.algorithms.paramcheck import HyperparameterError
from pflkit.sdk.builder import algorithm_for
from pflkit.sdk.config_types import (
    STRICT_CONFIG,
    Name,
    Rounds,
    Seed,
    describe,
    fields_at,
    in_range,
)
from pflkit.sdk.data.spec import MAX_AXES, MAX_AXIS, MAX_CLASSES, DatasetSpec
from pflkit.sdk.lr_schedule import LearningRateSchedule
from pflkit.sdk.models import check_input_shape, model_builder
from pflkit.sdk.registry import ImportPolicy, ImportRefused
from pflkit.sdk.run_config import ConfigError, SimConfig

InputShape = Annotated[tuple[Annotated[int, Strict(), in_range(1, MAX_AXIS)], ...],
                       Field(max_length=MAX_AXES)]


@pydantic.dataclasses.dataclass(frozen=True, config=STRICT_CONFIG)
class TaskConfig:
    """The algorithm, its model and inputs, the learning-rate schedule, the local SGD settings.

    The same for every round of a run: the task's ``round`` says which round to train, and
    :meth:`context` computes that round's learning rate from the schedule.
    """

    algorithm: Name  # built-in name, import path or entry point, as in the run config
    params: dict[str, Any]
    model: Name
    input_shape: InputShape  # one input without the batch dimension
    num_classes: Annotated[int, Strict(), in_range(1, MAX_CLASSES)]
    seed: Seed
    total_rounds: Rounds
    lr_schedule: LearningRateSchedule  # every round's learning rate: lr_schedule.at(round)
    local: LocalTraining

    def __post_init__(self) -> None:
        try:  # pfl-sim refuses such a run ([training] lr_decay): no round's rate may be 0
            self.lr_schedule.check_until(self.total_rounds)
        except ValueError as err:
            raise ValueError(f"lr_schedule.decay: {err}") from None

    @classmethod
    def of(cls, config: SimConfig, spec: DatasetSpec) -> TaskConfig:
        """The task of a run (the same for all its rounds).

        A dataset's spec beyond a task's ranges (200 000 classes) is a ConfigError naming the key.
        """
        try:  # by keyword: an error's location is the key's name, not its position
            return cls(algorithm=config.algorithm.name, params=dict(config.algorithm.params),
                       model=config.model.name, input_shape=tuple(spec.input_shape),
                       num_classes=spec.num_classes, seed=config.seed,
                       total_rounds=config.rounds, lr_schedule=config.training.lr_schedule,
                       local=config.training.local())
        except ValidationError as err:
            raise ConfigError(f"task config: {describe(err, known=fields_at(cls))}") from None

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any], imports: ImportPolicy) -> TaskConfig:
        """Validate a task's JSON ``config`` (ConfigError naming the key).

        The server chose its names: an import path the device's owner did not allow in
        ``imports`` is refused here, before anything is imported (:class:`ImportRefused`).
        ``params`` are then checked as pfl-sim checks ``[algorithm.params]``, the method's
        rules against ``local`` included (FedRep's ``body_epochs`` <= ``epochs``).
        """
        try:
            task = _ADAPTER.validate_python(dict(raw))
        except ValidationError as err:
            raise ConfigError(f"task config: {describe(err, known=fields_at(cls))}") from None
        for kind, ref in (("algorithm", task.algorithm), ("model", task.model)):
            try:
                imports.check(kind, ref)
            except ImportRefused as err:
                raise ImportRefused(f"task config: {err}") from None
        try:  # the method's rules against local too, as pfl-sim checks the same config
            check_algorithm(task.algorithm, task.params, task.local, task.lr_schedule.lr)
        except HyperparameterError as err:
            raise ConfigError(f"task config: params: {err}") from None
        return task

    def to_wire(self) -> dict[str, Any]:
        """JSON-ready form (the ``config`` of a task)."""
        out = dataclasses.asdict(self)
        out["input_shape"] = list(self.input_shape)
        return out

    def context(self, round_index: int, client_id: int) -> RoundContext:
        """What ``client_id`` trains round ``round_index`` under (the simulator's context).

        ``round_index = total_rounds`` is the post-federation stage.
        """
        return RoundContext(round_index, self.total_rounds, self.lr_schedule.at(round_index),
                            self.seed, client_id)

    def build(self) -> Algorithm:
        """The algorithm this task trains (resolved like the run config's names).

        Its model is resolved and checked against the inputs now (not called): a model the
        device cannot resolve is refused here, before enrolling, not after the first download.
        """
        check_input_shape(self.model, model_builder(self.model), self.input_shape)
        return algorithm_for(self.algorithm, self.params, self.model, self.input_shape,
                             self.num_classes, self.local)


_ADAPTER = TypeAdapter(TaskConfig)
