"""FedPer (Arivazhagan et al. 2019): shared base layers, personal head that never leaves.

Each client keeps its own copy of the ``head.*`` parameters; every round it trains the whole
model (global body + its head) for E epochs and sends only the body. The server averages the
bodies. The personalized model is the global body with the client's head.

:class:`PartialSharing` is the shared machinery for every method that splits the parameters
by name into a shared and a personal part (FedPer, FedRep, LG-FedAvg): subclasses choose
``personal_prefixes`` and, if needed, how the local epochs are spent (a
:class:`PartialTraining` with its own :meth:`~PartialTraining.train_round`).

Choice: a client's personal part starts as a copy of the round-0 global model's (all clients
share one initialization, as in the FedPer, FedRep and LG-FedAvg experiments); the server's copy
of the personal part is never updated (no client sends it) and is only that starting point.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

import torch
from torch import nn

from pflkit.sdk.algorithms.base import (
    Algorithm,
    Choice,
    ClientState,
    FitResult,
    RoundContext,
    State,
    register,
)
from pflkit.sdk.algorithms.device_training import DeviceTraining
from pflkit.sdk.algorithms.inference_role import Inference
from pflkit.sdk.algorithms.server_aggregation import ServerAggregation
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import SplitModel, float_state
from pflkit.sdk.training import cross_entropy_of, run_epochs, sgd


class PartialTraining(DeviceTraining):
    """Train the merged model; the shared part is the update, the personal part stays."""

    method: PartialSharing

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """Train the merged model; send the shared part, keep the personal part."""
        model = self.template(self.method.merged(global_state, client_state))
        loss = self.train_round(model, data, ctx)
        state = float_state(model)
        personal = self.method.is_personal
        update = {k: v for k, v in state.items() if not personal(k)}
        mine = {k: v for k, v in state.items() if personal(k)}
        return FitResult(update, ClientState(mine, client_state.meta), len(data),
                         {"train_loss": loss})

    def train_round(self, model: SplitModel, data: LabeledTensors, ctx: RoundContext) -> float:
        """FedPer and LG-FedAvg: E epochs of SGD on every parameter jointly."""
        return self.train_params(model, model.parameters(), data, self.local.epochs, ctx,
                                 "batches")

    def train_params(self, model: nn.Module, params: Iterable[nn.Parameter],
                     data: LabeledTensors, epochs: int, ctx: RoundContext, purpose: str) -> float:
        """``epochs`` of cross-entropy SGD on ``params`` only (a fresh optimizer)."""
        optimizer = sgd(params, ctx.lr, self.local.momentum, self.local.weight_decay)
        return run_epochs(optimizer, cross_entropy_of(model), data, epochs,
                          self.local.batch_size, ctx.generator(purpose))


class PartialAggregation(ServerAggregation):
    """The weighted mean of the shared part; a personal tensor in an update is rejected."""

    method: PartialSharing

    def update_schema(self, global_state: State) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Only the shared part may be uploaded."""
        return {k: (tuple(v.shape), v.dtype) for k, v in global_state.items()
                if not self.method.is_personal(k)}


class PartialInference(Inference):
    """The global shared part with the client's personal part."""

    method: PartialSharing

    def personalized_model(self, global_state: State, client_state: ClientState,
                           choice: Choice | None = None) -> nn.Module:
        """Combine the global shared part with this client's personal part."""
        self._reject_choice(choice)
        return self.global_model(self.method.merged(global_state, client_state))


class PartialSharing(Algorithm):
    """A model split by parameter name: shared tensors go to the server, personal ones stay."""

    personal_prefixes: ClassVar[tuple[str, ...]]
    Training = PartialTraining
    Aggregation = PartialAggregation
    Inference = PartialInference

    def is_personal(self, name: str) -> bool:
        """Whether a state entry belongs to the client's personal part."""
        return name.startswith(self.personal_prefixes)

    def merged(self, global_state: State, client_state: ClientState) -> State:
        """Global shared part + the client's personal part (the global copy if it has none)."""
        return {**global_state, **client_state.tensors}


@register
class FedPer(PartialSharing):
    """Personal classifier head (``head.*``), shared body."""

    name = "fedper"
    personal_prefixes = ("head.",)
