"""FedAvg, FedProx and FedAvg + local fine-tuning.

FedAvg (McMahan et al. 2017): each sampled client runs E epochs of SGD from the global model
and sends its weights; the server takes the sample-weighted mean. FedProx (Li et al. 2020)
adds (mu / 2) ||w - w_g||^2 to the local loss. FedAvg+FT personalizes after federation by
fine-tuning the final global model on each client's data (``personalize``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
from pflkit.sdk.algorithms.paramcheck import (
    Epochs,
    LearningRate,
    Strength,
    require_stable_pull,
    require_unset_while_off,
)
from pflkit.sdk.algorithms.personalization import Personalization
from pflkit.sdk.algorithms.state_layout import PERSONAL, add_prefix, personal_of
from pflkit.sdk.batched_training import BatchGrid, Stacked, repeat, train_together
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import float_state
from pflkit.sdk.training import Batch, cross_entropy_of, run_epochs, sgd


def squared_distance(params: Mapping[str, torch.Tensor], reference: Mapping[str, torch.Tensor]
                     ) -> torch.Tensor:
    """||w - w_ref||^2 summed over every tensor of ``params``."""
    return sum(((p - reference[n]) ** 2).sum() for n, p in params.items())  # type: ignore[return-value]


def proximal_loss(logits: torch.Tensor, batch: Batch, params: Mapping[str, torch.Tensor],
                  reference: Mapping[str, torch.Tensor], strength: float) -> torch.Tensor:
    """CE of ``logits`` + strength * ||w - w_ref||^2 (no term at strength 0: plain FedAvg)."""
    loss = batch.cross_entropy(logits)
    return loss + strength * squared_distance(params, reference) if strength else loss


def train_proximal(model: nn.Module, global_state: State, data: LabeledTensors,
                   ctx: RoundContext, local: LocalTraining, strength: float) -> torch.Tensor:
    """FedAvg's local loop: E epochs of SGD on :func:`proximal_loss`, ``model`` trained in place.

    Returns the mean batch loss (a scalar on the device, :func:`~pflkit.sdk.training.run_epochs`).
    """
    params = dict(model.named_parameters())

    def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return proximal_loss(model(x), Batch(x, y), params, global_state, strength)

    optimizer = sgd(model.parameters(), ctx.lr, local.momentum, local.weight_decay)
    return run_epochs(optimizer, loss_fn, data, local.epochs, local.batch_size,
                      ctx.generator("batches"))


def train_proximal_batch(model: nn.Module, global_state: State, datas: Sequence[LabeledTensors],
                         ctxs: Sequence[RoundContext], local: LocalTraining, lr: float,
                         strength: float) -> tuple[Stacked, torch.Tensor]:
    """FedAvg's local loop for several clients at once (see :mod:`pflkit.sdk.batched_training`).

    Returns each client's trained parameters (K, ...) and mean batch loss (K,).
    """
    grid = BatchGrid.build(datas, local.epochs, local.batch_size,
                           [c.generator("batches") for c in ctxs])

    def loss(p: dict[str, torch.Tensor], batch: Batch, _: dict) -> torch.Tensor:
        return proximal_loss(functional_call(model, p, (batch.x,)), batch, p, global_state,
                             strength)

    return train_together(loss, repeat(dict(model.named_parameters()), len(datas)), grid, lr,
                          local.momentum, local.weight_decay)


class FedAvgTraining(DeviceTraining):
    """E epochs of SGD on the whole model from the global weights; the new weights are sent."""

    @property
    def proximal_strength(self) -> float:
        """Weight of ||w - w_g||^2 in the local loss (FedProx's mu / 2); FedAvg has none."""
        return 0.0

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """E epochs of SGD from the global weights; send the new weights."""
        model = self.template(global_state)
        mean_loss = train_proximal(model, global_state, data, ctx, self.local,
                                   self.proximal_strength)
        return FitResult(float_state(model), client_state, len(data), {"train_loss": mean_loss})

    def fit_together(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """:meth:`fit` for several clients at once, one vmapped program."""
        model = self.template(global_state)
        trained, losses = train_proximal_batch(
            model, global_state, [j.data for j in jobs], [j.ctx for j in jobs], self.local,
            shared_lr(jobs), self.proximal_strength)
        base, mean_losses = float_state(model), losses.tolist()  # one host sync, not one each
        return [FitResult(base | {n: t[k] for n, t in trained.items()}, j.client_state,
                          len(j.data), {"train_loss": mean_losses[k]})
                for k, j in enumerate(jobs)]


@register
class FedAvg(Algorithm):
    """Federated averaging of the whole model."""

    name = "fedavg"
    Training = FedAvgTraining


@dataclass(frozen=True)
class FedProxParams:
    """FedProx's proximal strength (Li et al. 2020 search {0.001, 0.01, 0.1, 1})."""

    mu: Strength = 0.01  # the proximal term's weight (0: FedAvg)


class FedProxTraining(FedAvgTraining):
    """FedAvg's training with the proximal term (mu / 2) ||w - w_g||^2."""

    @property
    def proximal_strength(self) -> float:
        """Half of mu: the loss adds (mu / 2) ||w - w_g||^2 over the trainable weights."""
        return 0.5 * self.params.mu


@register
class FedProx(Algorithm):
    """FedAvg with the proximal term (mu / 2) ||w - w_g||^2."""

    name = "fedprox"
    Params = FedProxParams
    Training = FedProxTraining

    @classmethod
    def check_rates(cls, params: Any, local: LocalTraining, lr: float) -> None:
        """Refuse a mu that the local epochs' momentum SGD amplifies (it pulls w toward w_g)."""
        require_stable_pull(cls.name, "mu", (params or FedProxParams()).mu, local, lr)


@dataclass(frozen=True)
class FineTuneParams:
    """How FedAvg+FT personalizes the final global model."""

    ft_epochs: Epochs = 1  # local epochs of fine-tuning after federation
    ft_lr: LearningRate | None = None  # None: the learning rate of the round after the last

    def __post_init__(self) -> None:
        require_unset_while_off("fedavg_ft", self, "ft_epochs", "ft_lr")


class FineTune(Personalization):
    """After federation each client fine-tunes a copy of the final global model."""

    def personalize(self, global_state: State, client_state: ClientState, data: LabeledTensors,
                    ctx: RoundContext) -> ClientState:
        """Fine-tune a copy of the global model; keep it as the client's personal model."""
        model = self.template(global_state)
        lr = ctx.lr if self.params.ft_lr is None else self.params.ft_lr
        optimizer = sgd(model.parameters(), lr, self.local.momentum, self.local.weight_decay)
        run_epochs(optimizer, cross_entropy_of(model), data, self.params.ft_epochs,
                   self.local.batch_size, ctx.generator("fine-tune"))
        return ClientState(add_prefix(float_state(model), PERSONAL),
                           {**client_state.meta, "fine_tuned_round": ctx.round})


class PersonalModel(Inference):
    """The client's own whole model (``personal.*``) if it has one, else the global model."""

    def personalized_model(self, global_state: State, client_state: ClientState,
                           choice: Choice | None = None) -> nn.Module:
        """The personal model if this client has one, else the global model."""
        self._reject_choice(choice)
        return self.global_model(personal_of(client_state) or global_state)


@register
class FedAvgFineTune(Algorithm):
    """FedAvg, then each client fine-tunes the final global model on its own data."""

    name = "fedavg_ft"
    Params = FineTuneParams
    Training = FedAvgTraining
    Personalization = FineTune
    Inference = PersonalModel
