"""FedPer (Arivazhagan et al. 2019): shared base layers, personal head that never leaves.

Each client keeps its own copy of the ``head.*`` parameters; every round it trains the whole
model (global body + its head) for E epochs and sends only the body. The server averages the
bodies. The personalized model is the global body with the client's head.

:class:`PartialSharing` is the shared machinery for every method that splits the parameters
by name into a shared and a personal part (FedPer, FedRep, LG-FedAvg): subclasses choose
``personal_prefixes`` and, if needed, how the local epochs are spent (a
:class:`PartialTraining` with its own :meth:`~PartialTraining.train_round` and its batched
twin :meth:`~PartialTraining.train_round_together`, both built on training a subset of the
parameters with the rest frozen).

Choice: a client's personal part starts as a copy of the round-0 global model's (all clients
share one initialization, as in the FedPer, FedRep and LG-FedAvg experiments); the server's copy
of the personal part is never updated (no client sends it) and is only that starting point.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import ClassVar

import torch
from torch import nn
from torch.func import functional_call

from pflkit.sdk.algorithms.base import (
    Algorithm,
    Choice,
    ClientState,
    FitJob,
    FitResult,
    LocalTraining,
    RoundContext,
    State,
    register,
)
from pflkit.sdk.algorithms.device_training import DeviceTraining, shared_lr
from pflkit.sdk.algorithms.inference_role import Inference
from pflkit.sdk.algorithms.server_aggregation import ServerAggregation
from pflkit.sdk.batched_training import BatchGrid, Stacked, stack, train_together
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import SplitModel, float_state
from pflkit.sdk.training import Batch, cross_entropy_of, run_epochs, sgd


def train_params_together(model: nn.Module, start: Stacked, names: Collection[str],
                          jobs: Sequence[FitJob], local: LocalTraining, epochs: int,
                          purpose: str) -> tuple[Stacked, torch.Tensor]:
    """:meth:`PartialTraining.train_params` for a round's clients, each from its own state.

    ``start`` (K, ...) holds every entry of each client's model; the ``names`` entries are
    trained (a fresh optimizer), the rest stay frozen and enter the forward per client.
    Returns every entry (K, ...) and each client's mean batch loss (K,).
    """
    grid = BatchGrid.build([j.data for j in jobs], epochs, local.batch_size,
                           [j.ctx.generator(purpose) for j in jobs])
    frozen = {n: t for n, t in start.items() if n not in names}

    def loss(p: dict[str, torch.Tensor], batch: Batch, rest: dict[str, torch.Tensor]
             ) -> torch.Tensor:
        return batch.cross_entropy(functional_call(model, p | rest, (batch.x,)))

    trained, losses = train_together(loss, {n: start[n] for n in names}, grid, shared_lr(jobs),
                                     local.momentum, local.weight_decay, client_inputs=frozen)
    return start | trained, losses


class PartialTraining(DeviceTraining):
    """Train the merged model; the shared part is the update, the personal part stays."""

    method: PartialSharing

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """Train the merged model; send the shared part, keep the personal part."""
        model = self.template(self.method.merged(global_state, client_state))
        loss = self.train_round(model, data, ctx)
        return self._result(float_state(model), client_state, len(data), loss)

    def fit_together(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """:meth:`fit` for several clients at once, each from its own merged model."""
        model = self.template(global_state)
        start = stack([self.method.merged(global_state, j.client_state) for j in jobs])
        trained, losses = self.train_round_together(model, start, jobs)
        mean_losses = losses.tolist()  # one host sync, not one per client
        return [self._result({n: t[k] for n, t in trained.items()}, j.client_state,
                             len(j.data), mean_losses[k]) for k, j in enumerate(jobs)]

    def _result(self, state: State, client_state: ClientState, num_samples: int,
                loss: float | torch.Tensor) -> FitResult:
        """Send the shared part of ``state``; keep the personal part."""
        personal = self.method.is_personal
        update = {k: v for k, v in state.items() if not personal(k)}
        mine = {k: v for k, v in state.items() if personal(k)}
        return FitResult(update, ClientState(mine, client_state.meta), num_samples,
                         {"train_loss": loss})

    def train_round(self, model: SplitModel, data: LabeledTensors, ctx: RoundContext) -> float:
        """FedPer and LG-FedAvg: E epochs of SGD on every parameter jointly."""
        return self.train_params(model, model.parameters(), data, self.local.epochs, ctx,
                                 "batches")

    def train_round_together(self, model: SplitModel, start: Stacked, jobs: Sequence[FitJob]
                             ) -> tuple[Stacked, torch.Tensor]:
        """:meth:`train_round` for a round's clients: (trained states (K, ...), losses (K,))."""
        names = [n for n, _ in model.named_parameters()]
        return train_params_together(model, start, names, jobs, self.local, self.local.epochs,
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
