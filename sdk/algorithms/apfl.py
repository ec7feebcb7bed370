"""APFL (Deng et al. 2020): adaptive mixture of a local and the global model, alpha learned.

Per mini-batch, with w the client's copy of the global model, v its local model and
alpha in [0, 1] its mixing weight (Algorithm 1):
    w <- w - eta * grad f(w)
    v <- v - eta * grad_v f(v_bar),   v_bar = alpha * v + (1 - alpha) * w
    alpha <- alpha - eta_alpha * grad_alpha f(v_bar)   (= <v - w, grad f(v_bar)>), clipped to [0, 1]
Only w is sent; v and alpha stay on the device. The personalized model is
alpha * v + (1 - alpha) * w_global.

Choices: both steps use the same mini-batch; v_bar uses w as it was before this step's w update
(w is detached, so only v and alpha learn from the mixed loss). w and v use the shared SGD
settings (momentum, weight decay); alpha takes plain gradient steps with ``alpha_lr`` (None:
the round's lr), as in the paper. v starts as a copy of the first global model received.
w's normalization statistics (batch norm) come from w's own passes only, so the w a client
sends is FedAvg's, statistics included (Algorithm 1's w step sees grad f(w) alone); the mixed
passes update a scratch copy, dropped after the round. The personalized model takes the global
model's statistics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

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
from pflkit.sdk.algorithms.device_training import DeviceTraining, shared_lr
from pflkit.sdk.algorithms.gradtools import scratch_buffers
from pflkit.sdk.algorithms.inference import NUMBER, ChoiceSpec
from pflkit.sdk.algorithms.inference_role import Inference
from pflkit.sdk.algorithms.paramcheck import Fraction, LearningRate, require
from pflkit.sdk.algorithms.state_layout import PERSONAL, personal_of
from pflkit.sdk.batched_training import BatchGrid, PlainSGD, repeat, stack, train_together
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import float_state
from pflkit.sdk.training import Batch, forward_autocast, mean_loss, sgd

ALPHA = ChoiceSpec("alpha", NUMBER, "the weight of v in alpha v + (1 - alpha) w_global, in "
                   "place of the client's learned alpha (to sweep the mixture, as SuPerFed's "
                   "appendix does for APFL)", 0.0, 1.0, aliases=(("--lambda", ""),))


def alpha_mixture(local: State, global_: State, alpha: torch.Tensor | float) -> State:
    """Alpha * local + (1 - alpha) * global for float tensors; the rest from global."""
    return {k: alpha * local[k] + (1 - alpha) * g if g.is_floating_point() and k in local else g
            for k, g in global_.items()}


@dataclass(frozen=True)
class APFLParams:
    """APFL's mixing weight: its start value and whether (and how fast) it is learned."""

    alpha: Fraction = 0.5  # initial alpha (the paper's adaptive runs start from 0.5)
    adaptive: bool = True  # learn alpha per client; False: fixed alpha
    alpha_lr: LearningRate | None = None  # step size for alpha; None: the round's lr

    def __post_init__(self) -> None:
        """A step size for a fixed alpha would look used and do nothing: refused."""
        require("apfl", "alpha_lr", self.adaptive or self.alpha_lr is None,
                "unset while adaptive = false (alpha is fixed, no step is taken)", self.alpha_lr)


class APFLTraining(DeviceTraining):
    """w trained as FedAvg; v and alpha trained through the mixture, kept on the device."""

    method: APFL

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """One pass per mini-batch over w, then v and alpha, for E epochs."""
        model = self.template(global_state)
        names = [n for n, _ in model.named_parameters()]
        start = personal_of(client_state) or global_state
        v = {n: start[n].clone().requires_grad_(True) for n in names}
        alpha = torch.tensor(self.method.alpha_of(client_state), device=self.device,
                             requires_grad=self.params.adaptive)
        alpha_lr = ctx.lr if self.params.alpha_lr is None else self.params.alpha_lr
        opt_w = sgd(model.parameters(), ctx.lr, self.local.momentum, self.local.weight_decay)
        opt_v = sgd(v.values(), ctx.lr, self.local.momentum, self.local.weight_decay)
        scratch = scratch_buffers(model)  # the mixed passes' statistics, not w's
        generator = ctx.generator("batches")
        losses: list[torch.Tensor] = []  # no host synchronization per step
        for _ in range(self.local.epochs):
            for xb, yb in data.batches(self.local.batch_size, generator):
                w_now = {n: p.detach() for n, p in model.named_parameters()}
                mixed = {n: alpha * v[n] + (1 - alpha) * w_now[n] for n in names}
                with forward_autocast(xb.device):
                    mixed_loss = F.cross_entropy(functional_call(model, mixed | scratch, (xb,)),
                                                 yb)
                opt_v.zero_grad(set_to_none=True)
                alpha.grad = None
                mixed_loss.backward()
                opt_v.step()
                if self.params.adaptive and alpha.grad is not None:  # set by the backward
                    with torch.no_grad():
                        alpha.sub_(alpha_lr * alpha.grad).clamp_(0.0, 1.0)
                opt_w.zero_grad(set_to_none=True)
                with forward_autocast(xb.device):
                    loss = F.cross_entropy(model(xb), yb)
                loss.backward()
                opt_w.step()
                losses.append(loss.detach())
        personal = {PERSONAL + n: t.detach().clone() for n, t in v.items()}
        final_alpha = float(alpha.detach())
        meta = {**client_state.meta, "alpha": final_alpha}
        return FitResult(float_state(model), ClientState(personal, meta), len(data),
                         {"train_loss": mean_loss(losses, data.y.device), "alpha": final_alpha})

    def fit_together(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """:meth:`fit` for several clients at once: w, v and alpha of every client in one program.

        The mixed loss sees w detached, so w's loss and the mixed loss share no parameter: one
        backward of their sum at the step's start gives w's gradient and v's and alpha's, as
        :meth:`fit`'s two backwards do. w and v take the shared SGD; alpha plain clamped steps.
        """
        count, model = len(jobs), self.template(global_state)
        names = [n for n, _ in model.named_parameters()]
        lr = shared_lr(jobs)
        owns = [personal_of(j.client_state) or global_state for j in jobs]
        grid = BatchGrid.build([j.data for j in jobs], self.local.epochs, self.local.batch_size,
                               [j.ctx.generator("batches") for j in jobs])
        start = repeat({n: global_state[n] for n in names}, count) | {
            PERSONAL + n: t for n, t in stack([{n: own[n] for n in names} for own in owns]).items()}
        alphas = torch.tensor([self.method.alpha_of(j.client_state) for j in jobs],
                              device=grid.x.device)  # float32, as fit's alpha
        alpha_lr = lr if self.params.alpha_lr is None else self.params.alpha_lr
        learned = PlainSGD({"alpha": alphas}, alpha_lr, (0.0, 1.0))

        def loss(p: dict[str, torch.Tensor], batch: Batch, inputs: dict[str, torch.Tensor]
                 ) -> torch.Tensor:
            alpha = p["alpha"] if self.params.adaptive else inputs["alpha"]
            w = {n: p[n] for n in names}
            mixed = {n: alpha * p[PERSONAL + n] + (1 - alpha) * w[n].detach() for n in names}
            own = batch.cross_entropy(functional_call(model, w, (batch.x,)))
            mix = batch.cross_entropy(functional_call(model, mixed, (batch.x,)))
            return own + (mix - mix.detach())  # reports w's loss only, as fit does

        trained, losses = train_together(
            loss, start, grid, lr, self.local.momentum, self.local.weight_decay,
            client_inputs=None if self.params.adaptive else {"alpha": alphas},
            plain=learned if self.params.adaptive else None)
        final = trained["alpha"] if self.params.adaptive else alphas
        read = torch.cat([losses, final.double()]).tolist()  # one host sync for the round
        base, results = float_state(model), []
        for k, job in enumerate(jobs):
            personal = {PERSONAL + n: trained[PERSONAL + n][k].clone() for n in names}
            meta = {**job.client_state.meta, "alpha": read[count + k]}
            results.append(FitResult(base | {n: trained[n][k] for n in names},
                                     ClientState(personal, meta), len(job.data),
                                     {"train_loss": read[k], "alpha": read[count + k]}))
        return results


class APFLInference(Inference):
    """alpha v + (1 - alpha) w_global, alpha the client's or a chosen :data:`ALPHA`."""

    method: APFL
    choices = (ALPHA,)

    def personalized_model(self, global_state: State, client_state: ClientState,
                           choice: Choice | None = None) -> nn.Module:
        """Build alpha * v + (1 - alpha) * w_global (the global model if the client never trained).

        A chosen :data:`ALPHA` overrides the client's alpha.
        """
        alpha = self._reject_choice(choice).get(ALPHA.name)
        local = personal_of(client_state)
        if not local:
            return self.global_model(global_state)
        alpha = self.method.alpha_of(client_state) if alpha is None else alpha
        return self.global_model(alpha_mixture(local, global_state, alpha))


@register
class APFL(Algorithm):
    """Global model w trained as FedAvg, local model v and alpha trained through the mixture."""

    name = "apfl"
    Params = APFLParams
    params: APFLParams
    Training = APFLTraining
    Inference = APFLInference

    def alpha_of(self, client_state: ClientState) -> float:
        """Return the client's current mixing weight."""
        return float(client_state.meta.get("alpha", self.params.alpha))
