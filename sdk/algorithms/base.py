"""The algorithm contract: one definition serves simulation, deployment, evaluation, export.

An :class:`Algorithm` never touches the network or the disk. It turns
(global state, client state, local data, round context) into an update for the server and a
new client state (:meth:`Algorithm.fit`), folds a stream of updates into the next global state
(:meth:`Algorithm.new_aggregator`), runs post-federation stages (:meth:`Algorithm.personalize`)
and builds the inference module a client would ship (:meth:`Algorithm.personalized_model`).
The simulator calls it in-process; the HTTP server and the SDK client call the same methods on
either side of the wire; ``pfl-export`` calls ``personalized_model``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import pydantic
import torch
from torch import nn

# Aggregator, WeightedMean and State are re-exported: every method builds on them
from pflkit.sdk.algorithms.aggregators import Aggregator as Aggregator
from pflkit.sdk.algorithms.aggregators import State as State
from pflkit.sdk.algorithms.aggregators import WeightedMean as WeightedMean
from pflkit.sdk.algorithms.inference import (
    Choice,
    ChoiceSpec,
    InferenceModel,
    check_choice,
    describe_choice,
)

# HyperparameterError is re-exported: methods raise it from their Params' __post_init__
from pflkit.sdk.algorithms.paramcheck import HyperparameterError as HyperparameterError
from pflkit.sdk.algorithms.paramcheck import check_finite, parse_params
from pflkit.sdk.batched_training import batching_blocker
from pflkit.sdk.config_types import STRICT_CONFIG, BatchSize, Epochs, Momentum, WeightDecay
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import Shape, SplitModel, build_model, float_state
from pflkit.sdk.registry import ExtensionError, known_names, resolve
from pflkit.sdk.seeding import derive_seed

if TYPE_CHECKING:
    from pflkit.sdk.algorithms.personal import PersonalTraining



@dataclass(frozen=True)
class ModelFactory:
    """Which architecture, for which inputs: enough to rebuild the template anywhere.

    ``name`` is a built-in model name, an import path or an entry point (sdk/models.py).
    """

    name: str
    input_shape: Shape  # one input without the batch dimension: (C, H, W), (F,), (T, F), ...
    num_classes: int

    def build(self, seed: int = 0) -> SplitModel:
        """A fresh model with seeded weights."""
        return build_model(self.name, self.input_shape, self.num_classes, seed)


@pydantic.dataclasses.dataclass(frozen=True, config=STRICT_CONFIG)
class LocalTraining:
    """Client-side SGD settings shared by every algorithm (grouped once, not restated).

    Typed strictly like the run config they come from (and the task a client receives).
    """

    epochs: Epochs = 5  # local epochs per round (E)
    batch_size: BatchSize = 40  # mini-batch size (B)
    momentum: Momentum = 0.9  # SGD momentum; the optimizer is fresh every round
    weight_decay: WeightDecay = 1e-5  # L2 weight decay in the optimizer


@dataclass(frozen=True)
class RoundContext:
    """What a client needs to know about the round it trains in."""

    round: int  # 0-based index of the federated round
    total_rounds: int  # rounds planned for the run
    lr: float  # learning rate for this round (already decayed)
    seed: int  # run seed; per-client randomness is derived from (seed, round, client)
    client_id: int

    def rng_seed(self, *purpose: object) -> int:
        """A seed for one purpose of this client in this round."""
        return derive_seed(self.seed, "client", self.client_id, "round", self.round, *purpose)

    def generator(self, *purpose: object) -> torch.Generator:
        """A torch generator for one purpose of this client in this round."""
        gen = torch.Generator()
        gen.manual_seed(self.rng_seed(*purpose))
        return gen


@dataclass
class ClientState:
    """What stays on the device: named tensors plus small JSON metadata."""

    tensors: State = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def meta_json(self) -> str:
        """The metadata as canonical JSON (raises if not JSON-serializable)."""
        return json.dumps(self.meta, sort_keys=True)


@dataclass
class FitResult:
    """A client's answer to one round."""

    update: State  # tensors sent to the server (empty: nothing to aggregate)
    client_state: ClientState  # the device's new private state
    num_samples: int  # aggregation weight
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class FitJob:
    """One client's share of a round: what :meth:`Algorithm.fit` takes besides the global state."""

    client_state: ClientState
    data: LabeledTensors
    ctx: RoundContext


class Algorithm(ABC):
    """Base class: FedAvg's behaviour where a method does not say otherwise.

    Subclasses set ``name`` and, if they have hyperparameters, a frozen dataclass ``Params``;
    if their inference model takes options (a mixing weight, a class distribution), ``choices``.
    """

    name: ClassVar[str]
    Params: ClassVar[type] = type(None)
    choices: ClassVar[tuple[ChoiceSpec, ...]] = ()  # what inference_model's Choice may hold

    def __init__(self, model: ModelFactory, local: LocalTraining, params: Any = None) -> None:
        check_finite(self.name, params)
        self.model_factory = model
        self.local = local
        self.params = params
        self.device = torch.device("cpu")
        self._template: SplitModel | None = None
        self._model_blocker: tuple[str] | None = None  # the architecture's, computed once

    def to(self, device: torch.device | str) -> Algorithm:
        """Train and build inference modules on ``device`` from now on (returns self).

        States passed in and returned by the contract stay where the caller keeps them (the
        CPU, for aggregation and checkpoints); they are loaded into modules on this device.
        """
        self.device = torch.device(device)
        self._template = None
        return self

    def new_model(self, seed: int = 0) -> SplitModel:
        """A fresh model on this algorithm's device (seeded on the CPU: same weights anywhere)."""
        return self.model_factory.build(seed).to(self.device)

    # -- the contract ---------------------------------------------------------------------------
    def init_global(self, seed: int) -> State:
        """The round-0 global state (seeded model weights)."""
        return float_state(self.model_factory.build(derive_seed(seed, "global-init")))

    def init_client(self, client_id: int, seed: int, data: LabeledTensors) -> ClientState:
        """A client's state before its first round (default: nothing private)."""
        return ClientState()

    @abstractmethod
    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """Train on the client's data for one round."""

    def batching_blocker(self) -> str | None:
        """Why this method cannot train a round's clients as one batched program (None: it can).

        A method batches by implementing :meth:`fit_together`. A subclass that changes ``fit``
        but inherits ``fit_together`` cannot batch (it would train its parent's loss), and
        neither can a model whose layers mix the rows of a batch or draw random numbers.
        """
        together = _defining_class(type(self), "fit_together")
        if together is Algorithm:
            return f"{self.name} has no batched trainer"
        if not issubclass(together, _defining_class(type(self), "fit")):
            return f"{self.name} changes fit but has no batched version of it"
        if self._model_blocker is None:
            self._model_blocker = (batching_blocker(self.model_factory.build()) or "",)
        reason = self._model_blocker[0]
        return f"{self.name} on {self.model_factory.name}: {reason}" if reason else None

    def fit_batch(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """Train several clients of one round: together if the method can, else one by one.

        The results equal :meth:`fit` on each job up to float rounding.
        """
        if jobs and self.batching_blocker() is None:
            return self.fit_together(global_state, jobs)
        return [self.fit(global_state, j.client_state, j.data, j.ctx) for j in jobs]

    def fit_together(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """The batched trainer (:mod:`pflkit.sdk.batched_training`) of a method that has one."""
        raise NotImplementedError(f"{self.name} has no batched trainer")

    def new_aggregator(self, global_state: State, population: int) -> Aggregator:
        """How the server combines this round's updates (default: weighted mean).

        ``population`` is the number of clients the round samples from (SCAFFOLD's N).
        """
        return WeightedMean(global_state)

    def update_schema(self, global_state: State) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Names, shapes and dtypes an update may contain (the server validates against it)."""
        return {k: (tuple(v.shape), v.dtype) for k, v in global_state.items()}

    def server_queries(self) -> Mapping[str, Callable[[State, Any], State]]:
        """Computations on the newest global state that a server answers for its clients.

        Name -> function of (global state, the request's JSON body) -> named tensors, served
        as ``POST /v1/runs/{run}/queries/{name}`` (safetensors); a ValueError is the client's
        mistake (422). FedRoD offers ``head``; default: none.
        """
        return {}

    def personalize(self, global_state: State, client_state: ClientState, data: LabeledTensors,
                    ctx: RoundContext) -> ClientState:
        """A post-federation stage (fine-tuning, PFL-MoE stage 2); default: none."""
        return client_state

    def personal_training(self, global_state: State, client_state: ClientState,
                          data: LabeledTensors, ctx: RoundContext) -> PersonalTraining | None:
        """The post-federation stage as a trainable personal part a device can run.

        None: the method has no such stage (or its configured stage trains federated weights).
        See :mod:`pflkit.sdk.algorithms.personal`.
        """
        return None

    @property
    def has_personalization_stage(self) -> bool:
        """Whether :meth:`personalize` does anything (the simulator runs it before evaluation)."""
        return type(self).personalize is not Algorithm.personalize

    def personalized_model(self, global_state: State, client_state: ClientState,
                           choice: Choice | None = None) -> nn.Module:
        """The inference module for this client: images in, logits out (default: global)."""
        self._reject_choice(choice)
        return self.global_model(global_state)

    def inference_model(self, global_state: State, client_state: ClientState,
                        choice: Choice | None = None) -> InferenceModel:
        """Export's hook: the module for a user's choice, its outputs, the card's description.

        Default: ``head="generic"`` is :meth:`global_model`, anything else
        :meth:`personalized_model` with one ``logits`` output, described by the values the
        choice sets (checked against :attr:`choices`). Override it to add outputs, a runtime
        input or a richer description (docs/algorithms.md, "The algorithm contract").
        """
        choice = self.check_choice(choice)
        module = self.global_model(global_state) if choice.head == "generic" else \
            self.personalized_model(global_state, client_state, choice if choice.given else None)
        return InferenceModel(module, mixture=describe_choice(self.name, choice))

    def evaluation_choices(self, client_state: ClientState) -> dict[str, Choice | None]:
        """Named variants of a client's personalized model to score after the last round.

        The first entry is the headline number; SuPerFed adds one per lambda of its grid.
        """
        return {"": None}

    def global_model(self, global_state: State) -> nn.Module:
        """The generic (shared) model, for the global test set."""
        model = self.new_model()
        model.load_state_dict(global_state)
        return model.eval()

    # -- helpers for subclasses -------------------------------------------------------------------
    def template(self, state: State) -> SplitModel:
        """The reusable training module loaded with ``state`` (copied in, not aliased)."""
        if self._template is None:
            self._template = self.new_model()
        self._template.load_state_dict(state)
        self._template.train()
        return self._template

    def check_choice(self, choice: Choice | None) -> Choice:
        """``choice`` checked against :attr:`choices` (ValueError names the declared ones)."""
        return check_choice(self.name, self.choices, choice)

    def _reject_choice(self, choice: Choice | None) -> Choice:
        """Refuse what :attr:`choices` does not declare and the generic head; the checked choice."""
        choice = self.check_choice(choice)
        if choice.head != "personalized":
            raise ValueError(f"{self.name}: personalized_model builds the personalized head; "
                             f"the generic one is global_model")
        return choice


def _defining_class(cls: type, attribute: str) -> type:
    return next(c for c in cls.__mro__ if attribute in c.__dict__)


def shared_lr(jobs: Sequence[FitJob]) -> float:
    """The learning rate of the round that ``jobs`` belong to (batched training needs one)."""
    rates = {j.ctx.lr for j in jobs}
    if len(rates) != 1:
        raise ValueError(f"jobs of one batched fit must share one learning rate, got {rates}")
    return rates.pop()


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
    return found


def algorithm_names() -> list[str]:
    """Built-in algorithm names and installed ``pflkit.algorithms`` entry points."""
    return known_names("algorithm", ALGORITHMS)


def check_algorithm(name: str, params: Mapping[str, Any] | None = None) -> Any:
    """Resolve an algorithm and validate its hyperparameters (before any data is loaded)."""
    return parse_params(name, algorithm_class(name).Params, dict(params or {}))


def make_algorithm(name: str, model: ModelFactory, local: LocalTraining,
                   params: Mapping[str, Any] | None = None) -> Algorithm:
    """Instantiate an algorithm (name, import path or entry point) with validated params."""
    checked = check_algorithm(name, params)
    return algorithm_class(name)(model, local, checked)
