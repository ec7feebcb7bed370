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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.func import functional_call

from pflkit.sdk.algorithms.base import (
    Algorithm,
    ClientState,
    FitJob,
    FitResult,
    LocalTraining,
    RoundContext,
    State,
    register,
)
from pflkit.sdk.algorithms.device_training import shared_lr
from pflkit.sdk.algorithms.fedavg import FedAvgTraining, PersonalModel
from pflkit.sdk.algorithms.gradtools import added_gradient, gradient_term
from pflkit.sdk.algorithms.paramcheck import Epochs, Strength, require_stable_pull
from pflkit.sdk.algorithms.state_layout import PERSONAL, add_prefix, personal_of
from pflkit.sdk.batched_training import BatchGrid, repeat, stack, train_together
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import float_state
from pflkit.sdk.training import Batch, cross_entropy_of, run_epochs, sgd


@dataclass(frozen=True)
class DittoParams:
    """Ditto's regularization strength and personal solver length."""

    lam: Strength = 0.1  # lambda; the paper tunes it over {0.01, 0.1, 1, 2}
    personal_epochs: Epochs | None = None  # epochs on v per round; None: the local E


class DittoTraining(FedAvgTraining):
    """FedAvg's update for w, then the personal model v's epochs toward this round's w^t."""

    @property
    def personal_epochs(self) -> int:
        """Epochs on v per round (the local E unless ``personal_epochs`` is set)."""
        epochs = self.params.personal_epochs
        return self.local.epochs if epochs is None else epochs

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """Run the FedAvg update, then the personal model's epochs toward this round's w^t."""
        result = super().fit(global_state, client_state, data, ctx)
        model = self.template(personal_of(client_state) or global_state)
        optimizer = sgd(model.parameters(), ctx.lr, self.local.momentum, self.local.weight_decay)
        lam = self.params.lam
        # gradient of (lam / 2) ||v - w^t||^2 is lam (v - w^t)
        with added_gradient(model, lambda n, p: lam * (p.detach() - global_state[n])):
            loss = run_epochs(optimizer, cross_entropy_of(model), data, self.personal_epochs,
                              self.local.batch_size, ctx.generator("personal"))
        result.client_state = ClientState(add_prefix(float_state(model), PERSONAL),
                                          client_state.meta)
        result.metrics["personal_loss"] = loss
        return result

    def fit_together(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """:meth:`fit` for several clients at once: w and v of every client in one program.

        w and v do not depend on each other within a round, so the K w's (FedAvg's loop, lam 0)
        and the K v's (lam) train as 2K clients of one vmapped program.
        """
        count, model = len(jobs), self.template(global_state)
        base, params = float_state(model), dict(model.named_parameters())
        owns = [personal_of(j.client_state) or global_state for j in jobs]
        datas = [j.data for j in jobs]
        grid = BatchGrid.build(datas, self.local.epochs, self.local.batch_size,
                               [j.ctx.generator("batches") for j in jobs]).joined(
            BatchGrid.build(datas, self.personal_epochs, self.local.batch_size,
                            [j.ctx.generator("personal") for j in jobs]))
        w0, v0 = repeat(params, count), stack([{n: own[n] for n in params} for own in owns])
        start = {n: torch.cat([w0[n], v0[n]]) for n in params}  # (2K, ...) the w's, then the v's
        lams = torch.tensor([0.0] * count + [self.params.lam] * count, device=grid.x.device)

        def loss(p: dict[str, torch.Tensor], batch: Batch, inputs: dict[str, torch.Tensor]
                 ) -> torch.Tensor:
            # gradient of (lam / 2) ||v - w^t||^2 is lam (v - w^t); w's loss is lam = 0's
            pull = {n: inputs["lam"] * (v.detach() - global_state[n]) for n, v in p.items()}
            return batch.cross_entropy(functional_call(model, p, (batch.x,))) \
                + gradient_term(p, pull)

        trained, losses = train_together(loss, start, grid, shared_lr(jobs), self.local.momentum,
                                         self.local.weight_decay, client_inputs={"lam": lams})
        mean_losses = losses.tolist()  # one host sync for the round, not one per client
        results = []
        for k, (job, own) in enumerate(zip(jobs, owns, strict=True)):
            personal = {n: own[n].detach().clone() for n in base} | \
                {n: t[count + k].clone() for n, t in trained.items()}
            results.append(FitResult(
                base | {n: t[k] for n, t in trained.items()},
                ClientState(add_prefix(personal, PERSONAL), job.client_state.meta),
                len(job.data),
                {"train_loss": mean_losses[k], "personal_loss": mean_losses[count + k]}))
        return results


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

    @classmethod
    def check_rates(cls, params: Any, local: LocalTraining, lr: float) -> None:
        """Refuse a lam that v's momentum SGD amplifies (when v trains at all)."""
        params = params or DittoParams()
        if (local.epochs if params.personal_epochs is None else params.personal_epochs) > 0:
            require_stable_pull(cls.name, "lam", params.lam, local, lr)
