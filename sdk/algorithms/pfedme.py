"""pFedMe (Dinh et al. 2020): personalized models through Moreau envelopes.

Per mini-batch D (Algorithm 1), with w the client's local copy of the global model:
    theta <- approx. argmin_theta  f(theta; D) + (lam / 2) ||theta - w||^2
             (``inner_steps`` = K gradient steps of size ``personal_lr``, warm-started)
    w     <- w - eta * lam * (w - theta)
The client sends w; the server sets w_g <- (1 - beta) w_g + beta * mean(w_i). theta (the
personalized model, pFedMe's "PM") stays on the device.

Choices: defaults follow the paper's MNIST setting (lam = 15, K = 5, beta = 1) except
personal_lr = 0.05 instead of 0.1: with standardized inputs (this project's preprocessing) and
TwoNN on Fashion-MNIST, 0.1 diverges to NaN within two local epochs. eta is the round's lr.
pFedMe's own update rules are used (no momentum or weight decay: the paper's solver has
none). Within a round theta is warm-started from the previous mini-batch's theta (the public
code does the same), and from w at the round's start.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pflkit.sdk.algorithms.base import (
    Aggregator,
    Algorithm,
    Choice,
    ClientState,
    FitResult,
    RoundContext,
    State,
    WeightedMean,
    register,
)
from pflkit.sdk.algorithms.device_training import DeviceTraining
from pflkit.sdk.algorithms.inference_role import Inference
from pflkit.sdk.algorithms.paramcheck import require
from pflkit.sdk.algorithms.server_aggregation import ServerAggregation
from pflkit.sdk.algorithms.state_layout import PERSONAL, personal_of
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import float_state


@dataclass(frozen=True)
class PFedMeParams:
    """pFedMe's regularization, inner solver and server mixing."""

    lam: float = 15.0  # lambda: pull of theta toward w (and of w toward theta)
    inner_steps: int = 5  # K: gradient steps on the inner problem per mini-batch
    personal_lr: float = 0.05  # step size of the inner solver (paper: 0.1; see module doc)
    beta: float = 1.0  # server step: w_g <- (1 - beta) w_g + beta * mean(w_i)

    def __post_init__(self) -> None:
        for name in ("lam", "personal_lr", "beta"):
            require("pfedme", name, getattr(self, name) > 0, "> 0", getattr(self, name))
        require("pfedme", "inner_steps", self.inner_steps >= 1, ">= 1", self.inner_steps)


class BlendedMean(WeightedMean):
    """(1 - beta) * global + beta * weighted mean, for the keys clients sent."""

    def __init__(self, global_state: State, beta: float) -> None:
        super().__init__(global_state)
        self.beta = beta

    def result(self) -> State:
        """Blend the mean with the round's global state (floating tensors only)."""
        mean = super().result()
        g = self._global
        return {k: (1 - self.beta) * g[k] + self.beta * v if v.is_floating_point() else v
                for k, v in mean.items()}


class PFedMeTraining(DeviceTraining):
    """Per mini-batch: K inner steps on theta, one outer step on w; w is sent, theta kept."""

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """Per mini-batch: K inner steps on theta, one outer step on w."""
        model = self.template(global_state)  # its parameters are theta
        theta = dict(model.named_parameters())
        w = {n: p.detach().clone() for n, p in theta.items()}
        lam, p_lr = self.params.lam, self.params.personal_lr
        generator = ctx.generator("batches")
        total, steps = 0.0, 0
        for _ in range(self.local.epochs):
            for xb, yb in data.batches(self.local.batch_size, generator):
                for _ in range(self.params.inner_steps):
                    loss = F.cross_entropy(model(xb), yb)
                    grads = torch.autograd.grad(loss, list(theta.values()))
                    with torch.no_grad():
                        for (n, p), g in zip(theta.items(), grads, strict=True):
                            p.sub_(p_lr * (g + lam * (p - w[n])))
                with torch.no_grad():
                    for n, p in theta.items():
                        w[n].sub_(ctx.lr * lam * (w[n] - p))
                total += float(loss.detach())
                steps += 1
        state = float_state(model)
        personal = {PERSONAL + n: state[n] for n in theta}
        update = {**state, **w}
        return FitResult(update, ClientState(personal, client_state.meta), len(data),
                         {"train_loss": total / steps if steps else float("nan")})


class PFedMeAggregation(ServerAggregation):
    """w_g <- (1 - beta) w_g + beta * mean(w_i)."""

    def new_aggregator(self, global_state: State, population: int) -> Aggregator:
        """Use the weighted mean, blended with the old global model when beta != 1."""
        if self.params.beta == 1.0:
            return WeightedMean(global_state)
        return BlendedMean(global_state, self.params.beta)


class PFedMeInference(Inference):
    """The client's theta (pFedMe's personalized model) over the global state."""

    def personalized_model(self, global_state: State, client_state: ClientState,
                           choice: Choice | None = None) -> nn.Module:
        """Return theta from the client's last round (the global model if it never trained)."""
        self._reject_choice(choice)
        return self.global_model({**global_state, **personal_of(client_state)})


@register
class PFedMe(Algorithm):
    """Bi-level personalized FL: theta per client, w shared."""

    name = "pfedme"
    Params = PFedMeParams
    Training = PFedMeTraining
    Aggregation = PFedMeAggregation
    Inference = PFedMeInference
