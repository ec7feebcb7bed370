"""What the algorithm contract passes around: settings, the round, a client's state and answer.

Every role of a method (:mod:`~pflkit.sdk.algorithms.base`) reads and returns these; they hold
data only, so the roles, the executors and the server share them without importing a method.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pydantic
import torch

from pflkit.sdk.algorithms.aggregators import State
from pflkit.sdk.config_types import STRICT_CONFIG, BatchSize, Epochs, Momentum, WeightDecay
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import Shape, SplitModel, build_model
from pflkit.sdk.seeding import derive_seed


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
    # floats, or 0-dim tensors left on the device: executors read a round's in one transfer
    metrics: dict[str, float | torch.Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class FitJob:
    """One client's share of a round: what ``Training.fit`` takes besides the global state."""

    client_state: ClientState
    data: LabeledTensors
    ctx: RoundContext
