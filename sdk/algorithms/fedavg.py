"""FedAvg, FedProx and FedAvg + local fine-tuning.

FedAvg (McMahan et al. 2017): each sampled client runs E epochs of SGD from the global model
and sends its weights; the server takes the sample-weighted mean. FedProx (Li et al. 2020)
adds (mu / 2) ||w - w_g||^2 to the local loss. FedAvg+FT personalizes after federation by
fine-tuning the final global model on each client's data (``personalize``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pflkit.sdk.algorithms.base import (
    Algorithm,
    Choice,
    ClientState,
    FitResult,
    HyperparameterError,
    RoundContext,
    State,
    register,
)
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import float_state
from pflkit.sdk.training import run_epochs, sgd


@register
class FedAvg(Algorithm):
    """Federated averaging of the whole model."""

    name = "fedavg"

    def penalty(self, model: nn.Module, global_state: State) -> torch.Tensor | None:
        """An extra local loss term (FedProx's proximal term); FedAvg has none."""
        return None

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """E epochs of SGD from the global weights; send the new weights."""
        model = self.template(global_state)

        def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            loss = F.cross_entropy(model(x), y)
            extra = self.penalty(model, global_state)
            return loss if extra is None else loss + extra

        optimizer = sgd(model.parameters(), ctx.lr, self.local.momentum, self.local.weight_decay)
        mean_loss = run_epochs(optimizer, loss_fn, data, self.local.epochs, self.local.batch_size,
                               ctx.generator("batches"))
        return FitResult(float_state(model), client_state, len(data), {"train_loss": mean_loss})


@dataclass(frozen=True)
class FedProxParams:
    """FedProx's proximal strength (Li et al. 2020 search {0.001, 0.01, 0.1, 1})."""

    mu: float = 0.01

    def __post_init__(self) -> None:
        if self.mu < 0:
            raise HyperparameterError(f"fedprox: hyperparameter 'mu' must be >= 0, got {self.mu}")


@register
class FedProx(FedAvg):
    """FedAvg with the proximal term (mu / 2) ||w - w_g||^2."""

    name = "fedprox"
    Params = FedProxParams
    params: FedProxParams

    def penalty(self, model: nn.Module, global_state: State) -> torch.Tensor | None:
        """(mu / 2) * squared distance of the trainable weights to the round's global weights."""
        if self.params.mu == 0:
            return None
        total = sum(((p - global_state[n]) ** 2).sum() for n, p in model.named_parameters())
        return 0.5 * self.params.mu * total  # type: ignore[return-value]


@dataclass(frozen=True)
class FineTuneParams:
    """How FedAvg+FT personalizes the final global model."""

    ft_epochs: int = 1  # local epochs of fine-tuning after federation
    ft_lr: float | None = None  # None: the learning rate of the round after the last

    def __post_init__(self) -> None:
        if self.ft_epochs < 0:
            raise HyperparameterError("fedavg_ft: hyperparameter 'ft_epochs' must be >= 0")


@register
class FedAvgFineTune(FedAvg):
    """FedAvg, then each client fine-tunes the final global model on its own data."""

    name = "fedavg_ft"
    Params = FineTuneParams
    params: FineTuneParams

    def personalize(self, global_state: State, client_state: ClientState, data: LabeledTensors,
                    ctx: RoundContext) -> ClientState:
        """Fine-tune a copy of the global model; keep it as the client's personal model."""
        model = self.template(global_state)
        lr = ctx.lr if self.params.ft_lr is None else self.params.ft_lr
        optimizer = sgd(model.parameters(), lr, self.local.momentum, self.local.weight_decay)
        run_epochs(optimizer, lambda x, y: F.cross_entropy(model(x), y), data,
                   self.params.ft_epochs, self.local.batch_size, ctx.generator("fine-tune"))
        return ClientState({f"personal.{k}": v for k, v in float_state(model).items()},
                           {**client_state.meta, "fine_tuned_round": ctx.round})

    def personalized_model(self, global_state: State, client_state: ClientState,
                           choice: Choice | None = None) -> nn.Module:
        """The fine-tuned model if this client has one, else the global model."""
        self._reject_choice(choice)
        personal = {k.removeprefix("personal."): v for k, v in client_state.tensors.items()
                    if k.startswith("personal.")}
        return self.global_model(personal or global_state)
