"""SuPerFed's device training: eq. 4 on w_f and w_l, one client or a round's clients at once.

Before the start round L a round is FedProx's (:mod:`~pflkit.sdk.algorithms.fedavg`'s loop and
loss); from L on both endpoints train through the mixture
(:func:`~pflkit.sdk.algorithms.superfed_objective.superfed_loss`). w_f is sent, w_l and the
client's own running statistics stay (``local.*``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from pflkit.sdk.algorithms.base import ClientState, FitJob, FitResult, RoundContext, State
from pflkit.sdk.algorithms.device_training import DeviceTraining, shared_lr
from pflkit.sdk.algorithms.fedavg import train_proximal, train_proximal_batch
from pflkit.sdk.algorithms.mixing import float_buffers
from pflkit.sdk.algorithms.superfed_inference import LOCAL
from pflkit.sdk.algorithms.superfed_objective import (
    FlatLayout,
    compact_lambda,
    cosine,
    lambda_draws,
    lambda_sampler,
    superfed_loss,
)
from pflkit.sdk.batched_training import BatchGrid, train_together
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import float_state
from pflkit.sdk.seeding import derive_seed
from pflkit.sdk.training import Batch, run_epochs, sgd

if TYPE_CHECKING:
    from pflkit.sdk.algorithms.superfed import SuPerFed


class SuPerFedTraining(DeviceTraining):
    """E epochs from w_f = w_g (mixing with w_l from round L on); w_f is the update."""

    method: SuPerFed

    def init_client(self, client_id: int, seed: int, data: LabeledTensors) -> ClientState:
        """w_l from the client's own seeded init (different from the global model's)."""
        local = self.model_factory.build(derive_seed(seed, "superfed-local-init", client_id))
        return ClientState({LOCAL + k: v for k, v in float_state(local).items()
                            if v.is_floating_point()}, {"mixed_rounds": 0})

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """E epochs from w_f = w_g (mixing from round L on); send w_f and running statistics."""
        train, _ = self.method.split(data, ctx.seed, ctx.client_id)
        model = self.template(global_state)
        params = dict(model.named_parameters())
        local = {n: client_state.tensors[LOCAL + n] for n in params}
        mixing = ctx.round >= self.method.start_round(ctx.total_rounds)
        if mixing:
            loss, local, cos = self._fit_mixed(model, global_state, local, train, ctx)
        else:  # lambda = 0, w_l frozen, nu off: FedProx's loop and loss (mu' = 2 mu)
            loss = train_proximal(model, global_state, train, ctx, self.local, self.params.mu)
            cos = float("nan")
        return self._result(model, float_state(model), local, client_state, len(train), mixing,
                            loss, cos)

    def _result(self, model: nn.Module, update: State, local: State, client_state: ClientState,
                num_samples: int, mixing: bool, loss: float | torch.Tensor, cos: float
                ) -> FitResult:
        """Send w_f (and running statistics); keep w_l and the client's own statistics."""
        tensors = {LOCAL + n: w.detach().clone() for n, w in local.items()}
        tensors |= {LOCAL + n: update[n].clone() for n in float_buffers(model)}
        meta = {**client_state.meta,
                "mixed_rounds": int(client_state.meta.get("mixed_rounds", 0)) + int(mixing)}
        metrics = {"train_loss": loss} | ({"cosine": cos} if mixing else {})
        return FitResult(update, ClientState(tensors, meta), num_samples, metrics)

    def _fit_mixed(self, model: nn.Module, global_state: State, local: State,
                   data: LabeledTensors, ctx: RoundContext
                   ) -> tuple[torch.Tensor, State, float]:
        """From L on: eq. 4 on flat w_f and w_l, both in one SGD; w_f is written back to model."""
        params = dict(model.named_parameters())
        layout = FlatLayout.of(params)
        wf = layout.flatten(params).requires_grad_()
        wl = layout.flatten(local).requires_grad_()
        wg = layout.flatten(global_state)
        mixing = self.method.mixing
        draw = lambda_sampler(mixing, layout, ctx.generator("lambda"))
        mu, nu = self.params.mu, self.params.nu

        def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            lam = compact_lambda(mixing, draw()).to(wf.device)
            return superfed_loss(model, layout, wf, wl, wg, lam, Batch(x, y), mu, nu)

        optimizer = sgd([wf, wl], ctx.lr, self.local.momentum, self.local.weight_decay)
        loss = run_epochs(optimizer, loss_fn, data, self.local.epochs, self.local.batch_size,
                          ctx.generator("batches"))
        with torch.no_grad():
            for name, value in layout.unflatten(wf).items():
                params[name].copy_(value)
            cos = float(cosine(wf, wl))
        return loss, layout.unflatten(wl.detach()), cos

    def fit_together(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """:meth:`fit` for several clients of one round at once, one vmapped program."""
        if len({(j.ctx.round, j.ctx.total_rounds) for j in jobs}) != 1:
            raise ValueError(f"{self.name}: a batched fit takes the clients of one round")
        trains = [self.method.split(j.data, j.ctx.seed, j.ctx.client_id)[0] for j in jobs]
        ctxs = [j.ctx for j in jobs]
        model = self.template(global_state)
        params = dict(model.named_parameters())
        locals_ = [{n: j.client_state.tensors[LOCAL + n] for n in params} for j in jobs]
        mixing = ctxs[0].round >= self.method.start_round(ctxs[0].total_rounds)
        base = float_state(model)
        if mixing:
            losses, federated, locals_, cosines = self._fit_mixed_batch(
                model, global_state, locals_, trains, ctxs, shared_lr(jobs))
        else:
            trained, losses = train_proximal_batch(model, global_state, trains, ctxs, self.local,
                                                   shared_lr(jobs), self.params.mu)
            federated = [{n: t[k] for n, t in trained.items()} for k in range(len(jobs))]
            cosines = [float("nan")] * len(jobs)
        mean_losses = losses.tolist()  # one host sync for the round, not one per client
        return [self._result(model, base | {n: v.clone() for n, v in federated[k].items()},
                             locals_[k], j.client_state, len(trains[k]), mixing,
                             mean_losses[k], cosines[k])
                for k, j in enumerate(jobs)]

    def _fit_mixed_batch(self, model: nn.Module, global_state: State, locals_: list[State],
                         datas: list[LabeledTensors], ctxs: list[RoundContext], lr: float
                         ) -> tuple[torch.Tensor, list[State], list[State], list[float]]:
        """:meth:`_fit_mixed` for several clients: (losses, w_f and w_l per client, cosines)."""
        layout = FlatLayout.of(dict(model.named_parameters()))
        wg = layout.flatten(global_state)
        grid = BatchGrid.build(datas, self.local.epochs, self.local.batch_size,
                               [c.generator("batches") for c in ctxs])
        # (K, T, tensors): the draws fit makes, in its order (CPU generators, moved once)
        lams = torch.zeros(len(datas), max(grid.steps, default=0), len(layout.names))
        for k, ctx in enumerate(ctxs):
            lams[k, :grid.steps[k]] = lambda_draws(self.method.mixing, layout,
                                                   ctx.generator("lambda"), grid.steps[k])
        lams = compact_lambda(self.method.mixing, lams).to(wg.device)
        mu, nu = self.params.mu, self.params.nu

        def loss(p: dict[str, torch.Tensor], batch: Batch, inputs: dict[str, torch.Tensor]
                 ) -> torch.Tensor:
            return superfed_loss(model, layout, p["wf"], p["wl"], wg, inputs["lam"], batch, mu,
                                 nu)

        start = {"wf": wg.unsqueeze(0).repeat(len(datas), 1),
                 "wl": torch.stack([layout.flatten(local) for local in locals_])}
        trained, losses = train_together(loss, start, grid, lr, self.local.momentum,
                                         self.local.weight_decay, step_inputs={"lam": lams})
        wf, wl = trained["wf"], trained["wl"]
        cosines = torch.stack([cosine(wf[k], wl[k]) for k in range(len(datas))]).tolist()
        return (losses, [layout.unflatten(w) for w in wf], [layout.unflatten(w) for w in wl],
                cosines)
