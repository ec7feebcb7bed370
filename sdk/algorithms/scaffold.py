"""SCAFFOLD (Karimireddy et al. 2020): control variates correct client drift.

Server state: the model x plus the global control variate c, stored in the global state as
``control.<parameter name>``. Client state: its own control variate c_i (same names; zeros
before its first round). Each local step uses the corrected gradient g(y) - c_i + c. After the
round the client sets c_i+ and sends y_i (the model tensors) and Delta c_i = c_i+ - c_i as
``control_delta.<parameter name>``. The server (Algorithm 1):
    x <- x + eta_g * mean_i (y_i - x)        c <- c + (|S| / N) * mean_i Delta c_i
with the unweighted mean over the clients of the round.

c_i+ (the ``option`` hyperparameter):
- option II (default, the paper's recommendation): c_i+ = c_i - c + (x - y_i) / (K lr), the
  mean of the gradients along the client's own K steps. It is cheap and current. The paper
  states it for plain SGD; with heavy-ball momentum beta (the harness uses 0.9 for every
  method) K lr overstates nothing only if K is replaced by the steps' effective length
  ``effective_steps(K, beta)`` = sum_{m=1..K} (1 - beta^m) / (1 - beta), the distance momentum
  SGD travels under a constant gradient in units of lr * gradient (= K for beta = 0).
- option I: the full gradient of the client's loss at the server model x (one extra pass over
  its data). With 10% participation a client's c_i then dates from the round it last trained,
  many rounds old, at a very different x: on the FMNIST 50-client setting it diverged (NaN by
  round 6, |c| = 72.8) where option II trained (docs/baselines.md).

The paper's server takes the plain mean; this project does too (for equal-sized clients it
equals the n-weighted mean FedAvg uses). N is the population the Coordinator samples from
(``new_aggregator``'s ``population``: the federation in simulation, the round's roster on the
server).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import torch
import torch.nn.functional as F
from pydantic import Strict
from torch import nn
from torch.func import functional_call

from pflkit.sdk.algorithms.base import (
    Aggregator,
    Algorithm,
    ClientState,
    FitJob,
    FitResult,
    RoundContext,
    State,
    register,
)
from pflkit.sdk.algorithms.device_training import DeviceTraining, shared_lr
from pflkit.sdk.algorithms.gradtools import added_gradient, gradient_term, scratch_buffers
from pflkit.sdk.algorithms.inference_role import Inference
from pflkit.sdk.algorithms.paramcheck import LearningRate, in_range
from pflkit.sdk.algorithms.server_aggregation import ServerAggregation
from pflkit.sdk.algorithms.state_layout import strip_prefix
from pflkit.sdk.batched_training import BatchGrid, repeat, stack, train_together
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import float_state
from pflkit.sdk.training import Batch, cross_entropy_of, forward_autocast, run_epochs, sgd

Option = Annotated[int, Strict(), in_range(1, 2)]  # the c_i+ rules of Algorithm 1
CONTROL = "control."
DELTA = "control_delta."


@dataclass(frozen=True)
class ScaffoldParams:
    """SCAFFOLD's server step size and control-variate rule."""

    server_lr: LearningRate = 1.0  # eta_g (the paper's experiments use 1)
    option: Option = 2  # c_i+ rule of Algorithm 1: 2 = from the local steps, 1 = full gradient


def effective_steps(steps: int, momentum: float) -> float:
    """How far ``steps`` momentum-SGD steps move under a constant gradient, in plain steps.

    torch's SGD (no dampening) moves lr * g * sum_{m=1..K} (1 - beta^m) / (1 - beta) for a
    constant gradient g: option II divides (x - y_i) by lr times this, not by K lr.
    """
    if momentum == 0:
        return float(steps)
    return (steps - momentum * (1 - momentum**steps) / (1 - momentum)) / (1 - momentum)


def option_two_scale(steps: int, lr: float, momentum: float) -> float:
    """1 / (K lr) of option II, K momentum-corrected; 0 when no step was taken (c_i stays)."""
    return 1.0 / (lr * effective_steps(steps, momentum)) if steps and lr else 0.0


def split_state(state: State) -> tuple[State, State]:
    """(model tensors, control variates with the prefix removed) of a SCAFFOLD global state."""
    model = {k: v for k, v in state.items() if not k.startswith(CONTROL)}
    return model, strip_prefix(state, CONTROL)


class ScaffoldAggregator(Aggregator):
    """Unweighted running sums of y_i and Delta c_i; O(model) memory."""

    def __init__(self, global_state: State, server_lr: float, population: int) -> None:
        self._global = global_state
        self._server_lr = server_lr
        self._population = population
        self._sum: dict[str, torch.Tensor] = {}
        self._count = 0

    def add(self, weight: float, update: State) -> None:
        """Fold in one client (the sample count does not weigh in SCAFFOLD's mean)."""
        for key, value in update.items():
            term = value.detach().to(torch.float64)
            acc = self._sum.get(key)
            self._sum[key] = term if acc is None else acc.add_(term)
        self._count += 1

    def result(self) -> State:
        """Step the model, x + eta_g (mean y - x), and the control, c + (|S| / N) mean Delta c."""
        out = dict(self._global)
        if not self._count:
            return out
        share = self._count / self._population
        for key, acc in self._sum.items():
            mean = acc / self._count
            if key.startswith(DELTA):
                target = CONTROL + key.removeprefix(DELTA)
                ref = self._global[target]
                out[target] = (ref.double() + share * mean).to(ref.dtype)
            else:
                ref = self._global[key]
                if ref.is_floating_point():
                    out[key] = (ref.double() + self._server_lr * (mean - ref.double())).to(
                        ref.dtype)
                else:
                    out[key] = mean.round().to(ref.dtype)
        return out


class ScaffoldTraining(DeviceTraining):
    """Corrected local SGD, then the client's new control variate and its change."""

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """Corrected local SGD from x, then the new control variate and its change."""
        x, c = split_state(global_state)
        c_i = {n: client_state.tensors.get(CONTROL + n, torch.zeros_like(t))
               for n, t in c.items()}
        model = self.template(x)
        steps = self.local.epochs * math.ceil(len(data) / self.local.batch_size)
        if self.params.option == 1:  # no step (epochs = 0): no correction used, c_i stays
            c_new = self.full_gradient(model, data) if steps else dict(c_i)
        correction = {n: c[n] - c_i[n] for n in c}
        optimizer = sgd(model.parameters(), ctx.lr, self.local.momentum, self.local.weight_decay)
        with added_gradient(model, lambda n, p: correction[n]):  # g(y) - c_i + c
            loss = run_epochs(optimizer, cross_entropy_of(model), data, self.local.epochs,
                              self.local.batch_size, ctx.generator("batches"))
        y = float_state(model)
        if self.params.option == 2:  # c_i - c + (x - y_i) / (K lr), K momentum-corrected
            scale = option_two_scale(steps, ctx.lr, self.local.momentum)
            c_new = {n: c_i[n] - c[n] + (x[n] - y[n]) * scale for n in c} if scale \
                else dict(c_i)  # no step taken: nothing new to learn about c_i
        update = {**y, **{DELTA + n: c_new[n] - c_i[n] for n in c}}
        client = ClientState({CONTROL + n: t for n, t in c_new.items()}, client_state.meta)
        return FitResult(update, client, len(data), {"train_loss": loss})

    def batching_blocker(self) -> str | None:
        """Option I's full-gradient pass at x has no batched version; option II batches."""
        if self.params.option == 1:
            return "scaffold option 1 takes a full-gradient pass before training: not batched"
        return super().batching_blocker()

    def fit_together(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """:meth:`fit` (option II) for several clients at once, one vmapped program."""
        x, c = split_state(global_state)
        model = self.template(x)
        c_i = stack([{n: j.client_state.tensors.get(CONTROL + n, torch.zeros_like(t))
                      for n, t in c.items()} for j in jobs])  # (K, ...) each client's own
        grid = BatchGrid.build([j.data for j in jobs], self.local.epochs, self.local.batch_size,
                               [j.ctx.generator("batches") for j in jobs])

        def loss(p: dict[str, torch.Tensor], batch: Batch, correction: dict[str, torch.Tensor]
                 ) -> torch.Tensor:  # g(y) - c_i + c
            return batch.cross_entropy(functional_call(model, p, (batch.x,))) \
                + gradient_term(p, correction)

        lr, momentum = shared_lr(jobs), self.local.momentum
        trained, losses = train_together(
            loss, repeat(dict(model.named_parameters()), len(jobs)), grid, lr, momentum,
            self.local.weight_decay, client_inputs={n: c[n] - c_i[n] for n in c})
        scales = torch.tensor([option_two_scale(s, lr, momentum) for s in grid.steps],
                              device=grid.x.device)  # (K,) each client's own K
        c_new, delta = {}, {}
        for n, ref in c.items():  # c_i - c + (x - y_i) / (K lr), as fit computes it
            scale = scales.to(ref.dtype).view(-1, *(1,) * ref.dim())
            c_new[n] = torch.where(scale != 0, c_i[n] - ref + (x[n] - trained[n]) * scale,
                                   c_i[n])
            delta[DELTA + n] = c_new[n] - c_i[n]
        base, mean_losses = float_state(model), losses.tolist()  # one host sync, not one each
        return [FitResult(base | {n: t[k] for n, t in trained.items()}
                          | {n: t[k] for n, t in delta.items()},
                          ClientState({CONTROL + n: t[k].clone() for n, t in c_new.items()},
                                      j.client_state.meta),
                          len(j.data), {"train_loss": mean_losses[k]})
                for k, j in enumerate(jobs)]

    def full_gradient(self, model: nn.Module, data: LabeledTensors) -> State:
        """Compute the gradient of the mean cross-entropy over all of ``data`` (option I).

        The pass is no training step: it leaves the running statistics that y_i is sent with
        as the local steps alone make them. A parameter the loss never uses has gradient 0.
        """
        model.zero_grad(set_to_none=True)
        scratch = scratch_buffers(model)
        for xb, yb in data.batches(self.local.batch_size, shuffle=False):
            with forward_autocast(xb.device):
                logits = functional_call(model, scratch, (xb,))
                loss = F.cross_entropy(logits, yb, reduction="sum") / len(data)
            loss.backward()
        grads = {n: torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
                 for n, p in model.named_parameters()}  # a tensor the loss never uses: 0
        model.zero_grad(set_to_none=True)
        return grads


class ScaffoldAggregation(ServerAggregation):
    """The model and the global control variate, stepped by :class:`ScaffoldAggregator`."""

    def init_global(self, seed: int) -> State:
        """Build the model plus a zero global control variate per parameter."""
        state = super().init_global(seed)
        names = [n for n, _ in self.model_factory.build().named_parameters()]
        return {**state, **{CONTROL + n: torch.zeros_like(state[n]) for n in names}}

    def new_aggregator(self, global_state: State, population: int) -> Aggregator:
        """Unweighted model mean with server step size, plus the control-variate step."""
        return ScaffoldAggregator(global_state, self.params.server_lr, population)

    def update_schema(self, global_state: State) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Model tensors and control deltas; the global control variate itself is server-only."""
        model, control = split_state(global_state)
        schema = {k: (tuple(v.shape), v.dtype) for k, v in model.items()}
        schema.update({DELTA + k: (tuple(v.shape), v.dtype) for k, v in control.items()})
        return schema


class ScaffoldInference(Inference):
    """The model part of the global state (the control variate is no model)."""

    def global_model(self, global_state: State) -> nn.Module:
        """Build the model part of the global state."""
        return super().global_model(split_state(global_state)[0])


@register
class Scaffold(Algorithm):
    """FedAvg with drift-correcting control variates on the server and every client."""

    name = "scaffold"
    Params = ScaffoldParams
    Training = ScaffoldTraining
    Aggregation = ScaffoldAggregation
    Inference = ScaffoldInference
