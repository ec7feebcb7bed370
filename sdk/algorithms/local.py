"""Local-only training: every client trains its own model and nothing is shared.

The lower bound every personalized method must beat. The client's model starts from its own
seeded initialization and lives in the client state; updates are empty, so the global state
never changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from pflkit.sdk.algorithms.base import (
    Algorithm,
    Choice,
    ClientState,
    FitJob,
    FitResult,
    RoundContext,
    State,
    register,
)
from pflkit.sdk.algorithms.device_training import DeviceTraining
from pflkit.sdk.algorithms.fedper import train_params_together
from pflkit.sdk.algorithms.inference_role import Inference
from pflkit.sdk.algorithms.server_aggregation import ServerAggregation
from pflkit.sdk.batched_training import stack
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import float_state
from pflkit.sdk.seeding import derive_seed
from pflkit.sdk.training import cross_entropy_of, run_epochs, sgd


class LocalOnlyTraining(DeviceTraining):
    """Each client trains its own model for E epochs per round and sends nothing."""

    def init_client(self, client_id: int, seed: int, data: LabeledTensors) -> ClientState:
        """The client's own seeded initialization."""
        model = self.model_factory.build(derive_seed(seed, "local-init", client_id))
        return ClientState(float_state(model))

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """Train the private model; send nothing."""
        model = self.template(client_state.tensors)
        optimizer = sgd(model.parameters(), ctx.lr, self.local.momentum, self.local.weight_decay)
        loss = run_epochs(optimizer, cross_entropy_of(model), data, self.local.epochs,
                          self.local.batch_size, ctx.generator("batches"))
        return FitResult({}, ClientState(float_state(model), client_state.meta), len(data),
                         {"train_loss": loss})

    def fit_together(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """:meth:`fit` for several clients at once, each from its own model."""
        model = self.template(global_state)  # the architecture; every weight is the client's
        names = [n for n, _ in model.named_parameters()]
        trained, losses = train_params_together(
            model, stack([j.client_state.tensors for j in jobs]), names, jobs, self.local,
            self.local.epochs, "batches")
        mean_losses = losses.tolist()  # one host sync, not one per client
        return [FitResult({}, ClientState({n: t[k] for n, t in trained.items()},
                                          j.client_state.meta), len(j.data),
                          {"train_loss": mean_losses[k]}) for k, j in enumerate(jobs)]


class NothingShared(ServerAggregation):
    """Nothing is uploaded: the update is empty and the global state never changes."""

    def update_schema(self, global_state: State) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """No tensor may be uploaded."""
        return {}


class OwnModel(Inference):
    """The client's own model."""

    def personalized_model(self, global_state: State, client_state: ClientState,
                           choice: Choice | None = None) -> nn.Module:
        """The client's own model (the global one before it trained)."""
        self._reject_choice(choice)
        return self.global_model(client_state.tensors or global_state)


@register
class LocalOnly(Algorithm):
    """Each client trains alone for E epochs per round."""

    name = "local"
    Training = LocalOnlyTraining
    Aggregation = NothingShared
    Inference = OwnModel
