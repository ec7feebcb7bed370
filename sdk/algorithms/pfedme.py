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

The inner problem's quadratic term alone has curvature lam in every direction, so each inner
step scales theta - w by about (1 - personal_lr * lam) wherever the loss's curvature is small
(most directions of a network's loss): from personal_lr * lam = 2 on, every gradient there is
amplified step after step and the K steps diverge whatever the data (the paper's step
condition nu < 2 / (L + lam), less the data's L), so that product is refused. The outer step
scales theta - w there by (1 - eta * lam), so a round also needs
|1 - personal_lr * lam|^K * |1 - eta * lam| < 1 (sharp, measured; the defaults meet it for
every eta up to 68). eta is the round's lr, from [training]: ``check_rates`` checks it with
the config, at round 0's rate (the largest).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from pflkit.sdk.algorithms.base import (
    Aggregator,
    Algorithm,
    Choice,
    ClientState,
    FitJob,
    FitResult,
    LocalTraining,
    RoundContext,
    State,
    WeightedMean,
    register,
)
from pflkit.sdk.algorithms.device_training import DeviceTraining, shared_lr
from pflkit.sdk.algorithms.gradtools import gradient_term
from pflkit.sdk.algorithms.inference_role import Inference
from pflkit.sdk.algorithms.paramcheck import (
    LearningRate,
    PositiveStrength,
    Steps,
    meets_declaration,
    require,
)
from pflkit.sdk.algorithms.server_aggregation import ServerAggregation
from pflkit.sdk.algorithms.state_layout import PERSONAL, personal_of
from pflkit.sdk.batched_training import BatchGrid, PlainSGD, repeat, train_together
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import float_state
from pflkit.sdk.training import Batch, forward_autocast, mean_loss

OUTER = "outer."  # w's names beside theta's in a batched trainer's parameters


@dataclass(frozen=True)
class PFedMeParams:
    """pFedMe's regularization, inner solver and server mixing."""

    lam: PositiveStrength = 15.0  # lambda: pull of theta toward w (and of w toward theta)
    inner_steps: Steps = 5  # K: gradient steps on the inner problem per mini-batch
    personal_lr: LearningRate = 0.05  # step size of the inner solver (paper: 0.1; module doc)
    # server step w_g <- (1 - beta) w_g + beta * mean(w_i): a step size, ranged as SCAFFOLD's
    # eta_g (the public code's default is 1; 1000 made the global model NaN within 3 rounds)
    beta: LearningRate = 1.0

    def __post_init__(self) -> None:
        """Refuse personal_lr * lam >= 2: theta's inner steps diverge there (module doc)."""
        if meets_declaration("pfedme", self):
            require("pfedme", "personal_lr", self.personal_lr * self.lam < 2,
                    f"< 2 / lam = {2 / self.lam:.6g} (personal_lr * lam < 2, or theta's inner "
                    "steps diverge)", self.personal_lr)


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
        losses: list[torch.Tensor] = []  # no host synchronization per step
        for _ in range(self.local.epochs):
            for xb, yb in data.batches(self.local.batch_size, generator):
                for _ in range(self.params.inner_steps):
                    with forward_autocast(xb.device):
                        loss = F.cross_entropy(model(xb), yb)
                    # a parameter the loss does not reach: gradient 0, still pulled toward w
                    grads = torch.autograd.grad(loss, list(theta.values()),
                                                materialize_grads=True)
                    with torch.no_grad():
                        for (n, p), g in zip(theta.items(), grads, strict=True):
                            p.sub_(p_lr * (g + lam * (p - w[n])))
                with torch.no_grad():
                    for n, p in theta.items():
                        w[n].sub_(ctx.lr * lam * (w[n] - p))
                losses.append(loss.detach())
        state = float_state(model)
        personal = {PERSONAL + n: state[n] for n in theta}
        update = {**state, **w}
        return FitResult(update, ClientState(personal, client_state.meta), len(data),
                         {"train_loss": mean_loss(losses, data.y.device)})

    def fit_together(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """:meth:`fit` for several clients at once: every batch's K inner steps as K steps.

        A step's gradients are taken at its start, so w's update after a batch's last inner
        step (it reads the new theta) happens at the next batch's first step, where theta's
        pull already uses the updated w; after the loop, each client's last batch's update.
        theta takes plain steps of ``personal_lr``, w plain steps of the round's lr.
        """
        count, model = len(jobs), self.template(global_state)
        names, times = [n for n, _ in model.named_parameters()], self.params.inner_steps
        lam, lr = self.params.lam, shared_lr(jobs)
        grid = BatchGrid.build([j.data for j in jobs], self.local.epochs, self.local.batch_size,
                               [j.ctx.generator("batches") for j in jobs]).repeated(times)
        t = torch.arange(grid.rows.shape[1], device=grid.x.device)
        # w's update from the previous batch (0 at the first: w = theta), the reported loss
        marks = {"pull": t % times == 0, "last": t % times == times - 1}
        start = repeat({n: global_state[n] for n in names}, count)

        def loss(p: dict[str, torch.Tensor], batch: Batch, inputs: dict[str, torch.Tensor]
                 ) -> torch.Tensor:
            theta, w = {n: p[n] for n in names}, {n: p[OUTER + n] for n in names}
            # w's pending update lam (w - theta) as its gradient: the plain step w -= lr g
            pull = {n: inputs["pull"] * lam * (w[n] - theta[n]).detach() for n in names}
            # theta's proximal gradient toward w as it is after that step
            toward = {n: lam * (theta[n] - (w[n] - lr * pull[n])).detach() for n in names}
            ce = batch.cross_entropy(functional_call(model, theta, (batch.x,)))
            reported = inputs["last"] * times * ce.detach()  # mean over T * times steps: fit's
            return reported + (ce - ce.detach()) + gradient_term(theta, toward) \
                + gradient_term(w, pull)

        trained, losses = train_together(
            loss, start, grid, self.params.personal_lr, 0.0, 0.0,
            step_inputs={k: v.float().expand(count, -1) for k, v in marks.items()},
            plain=PlainSGD({OUTER + n: v for n, v in start.items()}, lr))
        mean_losses, base, results = losses.tolist(), float_state(model), []
        for k, job in enumerate(jobs):
            w = {n: trained[OUTER + n][k] for n in names}
            if grid.steps[k]:  # the last batch's w update
                w = {n: v - lr * lam * (v - trained[n][k]) for n, v in w.items()}
            personal = {PERSONAL + n: trained[n][k].clone() for n in names}
            results.append(FitResult(base | w, ClientState(personal, job.client_state.meta),
                                     len(job.data), {"train_loss": mean_losses[k]}))
        return results


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

    @classmethod
    def check_rates(cls, params: Any, local: LocalTraining, lr: float) -> None:
        """Refuse a lam whose mini-batches amplify theta - w (module doc).

        Along a flat direction each scales it by (1 - personal_lr lam)^K (1 - lr lam).
        """
        p = params or PFedMeParams()
        factor = abs(1 - p.personal_lr * p.lam) ** p.inner_steps * abs(1 - lr * p.lam)
        require(cls.name, "lam", factor < 1,
                f"such that |1 - personal_lr lam|^K |1 - lr lam| < 1 (with lr {lr:g}, "
                f"personal_lr {p.personal_lr:g}, K {p.inner_steps}: {factor:.6g}; else each "
                "mini-batch amplifies theta - w and the run diverges)", p.lam)
