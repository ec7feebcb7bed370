"""The algorithm contract: one definition serves simulation, deployment, evaluation, export.

A method (:class:`Algorithm`) is composed of four roles, each a class it names as it names its
``Params``, each called by a different part of pflkit:

* ``Training`` (:class:`~pflkit.sdk.algorithms.device_training.DeviceTraining`): what a device
  runs each round (the SDK client, the simulator's executors);
* ``Aggregation`` (:class:`~pflkit.sdk.algorithms.server_aggregation.ServerAggregation`): what
  the server runs: the round-0 state, the update schema, the aggregator, its queries;
* ``Personalization`` (:class:`~pflkit.sdk.algorithms.personalization.Personalization`): the
  post-federation stage;
* ``Inference`` (:class:`~pflkit.sdk.algorithms.inference_role.Inference`): the models export,
  evaluation and the server's queries build, and the choices they take.

No role touches the network or the disk. The simulator calls them in-process; the HTTP server
and the SDK client call the same roles on either side of the wire; ``pfl-export`` calls the
inference role.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from pflkit.sdk.algorithms import inference_role, personalization, server_aggregation

# Aggregator, WeightedMean and State are re-exported: every method builds on them
from pflkit.sdk.algorithms.aggregators import Aggregator as Aggregator
from pflkit.sdk.algorithms.aggregators import State as State
from pflkit.sdk.algorithms.aggregators import WeightedMean as WeightedMean

# the contract's data types are re-exported: methods, docs and extensions import them from here
from pflkit.sdk.algorithms.contract_types import ClientState as ClientState
from pflkit.sdk.algorithms.contract_types import FitJob as FitJob
from pflkit.sdk.algorithms.contract_types import FitResult as FitResult
from pflkit.sdk.algorithms.contract_types import LocalTraining as LocalTraining
from pflkit.sdk.algorithms.contract_types import ModelFactory as ModelFactory
from pflkit.sdk.algorithms.contract_types import RoundContext as RoundContext
from pflkit.sdk.algorithms.device_training import DeviceTraining
from pflkit.sdk.algorithms.inference import Choice as Choice

# HyperparameterError is re-exported: methods raise it from their Params' __post_init__
from pflkit.sdk.algorithms.paramcheck import HyperparameterError as HyperparameterError
from pflkit.sdk.algorithms.paramcheck import check_declared, parse_params
from pflkit.sdk.models import SplitModel
from pflkit.sdk.registry import ExtensionError, known_names, resolve


class Algorithm:
    """A method: its name, its settings, and its four roles built from them.

    Subclasses set ``name``, ``Training`` (a :class:`DeviceTraining` with ``fit``) and, where
    they differ from the defaults, ``Params`` (a frozen dataclass of hyperparameters),
    ``Aggregation`` (default: weighted mean), ``Personalization`` (default: no stage) and
    ``Inference`` (default: the global model for every client, no choices).
    """

    name: ClassVar[str]
    Params: ClassVar[type] = type(None)
    Training: ClassVar[type[DeviceTraining]]
    Aggregation: ClassVar[type[server_aggregation.ServerAggregation]] = \
        server_aggregation.ServerAggregation
    Personalization: ClassVar[type[personalization.Personalization]] = \
        personalization.Personalization
    Inference: ClassVar[type[inference_role.Inference]] = inference_role.Inference

    def __init__(self, model: ModelFactory, local: LocalTraining, params: Any = None) -> None:
        check_declared(self.name, params)
        self.check_local(params, local)
        self.model_factory = model
        self.local = local
        self.params = params
        self.device = torch.device("cpu")
        self._template: SplitModel | None = None
        self.training = self.Training(self)
        self.aggregation = self.Aggregation(self)
        self.personalization = self.Personalization(self)
        self.inference = self.Inference(self)

    @classmethod
    def check_local(cls, params: Any, local: LocalTraining) -> None:
        """Rules between the method's settings and the run's ``[training]`` (none by default).

        Run with the config's other checks, so a run config breaking one is refused before
        any data is loaded, naming ``algorithm.params``.
        """

    @classmethod
    def check_rates(cls, params: Any, local: LocalTraining, lr: float) -> None:
        """Rules between the method's pulls and the step size ``lr`` (none by default).

        ``lr`` is round 0's, the largest (the decay is at most 1): a pull of strength s on
        momentum-m SGD diverges along every direction the loss leaves flat once lr * s reaches
        2 (1 + m), whatever the data, so such a run is refused with the config's checks.
        """

    def to(self, device: torch.device | str) -> Algorithm:
        """Train and build inference modules on ``device`` from now on (returns self).

        States passed in and returned by the roles stay where the caller keeps them (the
        CPU, for aggregation and checkpoints); they are loaded into modules on this device.
        """
        self.device = torch.device(device)
        self._template = None
        return self

    def new_model(self, seed: int = 0) -> SplitModel:
        """A fresh model on this algorithm's device (seeded on the CPU: same weights anywhere)."""
        return self.model_factory.build(seed).to(self.device)

    def template(self, state: State) -> SplitModel:
        """The reusable training module loaded with ``state`` (copied in, not aliased)."""
        if self._template is None:
            self._template = self.new_model()
        self._template.load_state_dict(state)
        self._template.train()
        return self._template


ALGORITHMS: dict[str, type[Algorithm]] = {}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: make an algorithm available by its ``name``."""
    if cls.name in ALGORITHMS:
        raise ValueError(f"algorithm '{cls.name}' registered twice")
    ALGORITHMS[cls.name] = cls
    return cls


def algorithm_class(ref: str) -> type[Algorithm]:
    """The class a built-in name, import path or ``pflkit.algorithms`` entry point names."""
    found = resolve("algorithm", ref, ALGORITHMS)
    if not (isinstance(found, type) and issubclass(found, Algorithm)):
        raise ExtensionError(f"algorithm '{ref}' is not a subclass of "
                             "pflkit.sdk.algorithms.Algorithm")
    if not isinstance(getattr(found, "name", None), str):
        raise ExtensionError(f"algorithm '{ref}': its class sets no name (name = \"...\"), "
                             "which its errors, metrics and model cards use")
    training = getattr(found, "Training", None)
    if not (isinstance(training, type) and issubclass(training, DeviceTraining)):
        raise ExtensionError(f"algorithm '{ref}': its class names no Training (Training = a "
                             "subclass of pflkit.sdk.algorithms.DeviceTraining with fit)")
    return found


def algorithm_names() -> list[str]:
    """Built-in algorithm names and installed ``pflkit.algorithms`` entry points."""
    return known_names("algorithm", ALGORITHMS)


def check_algorithm(name: str, params: Mapping[str, Any] | None = None,
                    local: LocalTraining | None = None, lr: float | None = None) -> Any:
    """Resolve an algorithm and validate its hyperparameters (before any data is loaded).

    Given the run's ``local`` training, the method's rules against it too (``check_local``),
    and given also its first learning rate, those against the step size (``check_rates``).
    """
    cls = algorithm_class(name)
    parsed = parse_params(name, cls.Params, dict(params or {}))
    if local is not None:
        cls.check_local(parsed, local)
        if lr is not None:
            cls.check_rates(parsed, local, lr)
    return parsed


def make_algorithm(name: str, model: ModelFactory, local: LocalTraining,
                   params: Mapping[str, Any] | None = None) -> Algorithm:
    """Instantiate an algorithm (name, import path or entry point) with validated params."""
    checked = check_algorithm(name, params)
    return algorithm_class(name)(model, local, checked)
