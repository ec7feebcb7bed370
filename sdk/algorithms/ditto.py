"""Ditto (Li et al. 2021): a personal model regularized toward the global one.

Each sampled client (1) trains the global model w exactly as FedAvg and sends it, and (2)
trains its personal model v on F_k(v) + (lam / 2) ||v - w^t||^2, where w^t is the global model
it received this round (Algorithm 1). v never leaves the device and is the personalized model.

Choices: v starts as a copy of the first global model the client receives (the public code
initializes v from the initial global model). The personal solver runs ``personal_epochs``
epochs (default: the same E as the global update, as the public code does) with the shared SGD
settings; the paper's s local personal iterations are this knob.
"""

from __future__ import annotations

from dataclasses import dataclass

from pflkit.sdk.algorithms.base import (
    Algorithm,
    ClientState,
    FitResult,
    RoundContext,
    State,
    register,
)
from pflkit.sdk.algorithms.fedavg import FedAvgTraining, PersonalModel
from pflkit.sdk.algorithms.gradtools import added_gradient
from pflkit.sdk.algorithms.paramcheck import require
from pflkit.sdk.algorithms.state_layout import PERSONAL, add_prefix, personal_of
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import float_state
from pflkit.sdk.training import cross_entropy_of, run_epochs, sgd


@dataclass(frozen=True)
class DittoParams:
    """Ditto's regularization strength and personal solver length."""

    lam: float = 0.1  # lambda; the paper tunes it over {0.01, 0.1, 1, 2}
    personal_epochs: int | None = None  # epochs on v per round; None: the local E

    def __post_init__(self) -> None:
        require("ditto", "lam", self.lam >= 0, ">= 0", self.lam)
        epochs = self.personal_epochs
        require("ditto", "personal_epochs", epochs is None or epochs >= 0, ">= 0", epochs)


class DittoTraining(FedAvgTraining):
    """FedAvg's update for w, then the personal model v's epochs toward this round's w^t."""

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """Run the FedAvg update, then the personal model's epochs toward this round's w^t."""
        result = super().fit(global_state, client_state, data, ctx)
        model = self.template(personal_of(client_state) or global_state)
        epochs = self.local.epochs if self.params.personal_epochs is None \
            else self.params.personal_epochs
        optimizer = sgd(model.parameters(), ctx.lr, self.local.momentum, self.local.weight_decay)
        lam = self.params.lam
        # gradient of (lam / 2) ||v - w^t||^2 is lam (v - w^t)
        with added_gradient(model, lambda n, p: lam * (p.detach() - global_state[n])):
            loss = run_epochs(optimizer, cross_entropy_of(model), data, epochs,
                              self.local.batch_size, ctx.generator("personal"))
        result.client_state = ClientState(add_prefix(float_state(model), PERSONAL),
                                          client_state.meta)
        result.metrics["personal_loss"] = loss
        return result


@register
class Ditto(Algorithm):
    """FedAvg for the global model plus a proximally regularized personal model.

    The personalized model is the personal model v (the global model if the client never
    trained).
    """

    name = "ditto"
    Params = DittoParams
    Training = DittoTraining
    Inference = PersonalModel
