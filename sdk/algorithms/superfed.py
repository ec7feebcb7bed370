"""SuPerFed (Hong et al., KDD'22): a connected low-loss subspace between federated and local.

Each client holds a federated model w_f (reset to the global model every round, the only thing
sent to the server) and a local model w_l (its own seeded random init, never leaves the device).
Every mini-batch trains the mixture W(lambda) = (1 - lambda) w_f + lambda w_l with

    loss = CE(h(x; W(lambda)), y) + mu ||w_f - w_g||^2 + nu cos^2(w_f, w_l)            (eq. 4)

through ``torch.func.functional_call``: ONE backward gives w_f the gradient (1 - lambda) dCE/dW
and w_l the gradient lambda dCE/dW (eq. 5-6). Model mixing (``superfed_mm``) draws one lambda
~ U(0, 1) per batch; layer mixing (``superfed_lm``, section 3.7) one per layer (a layer = a
module owning parameters: each linear, conv and norm layer) per batch. After federation every
lambda in [0, 1] is a usable model; each client picks its own on held-out training rows.
The loss is in :mod:`~pflkit.sdk.algorithms.superfed_objective`; the personalized model W(lambda)
(lambda resolved once, baked in or a runtime input, the card's mixture) in
:mod:`~pflkit.sdk.algorithms.superfed_inference`.

Choices where the papers (000 KDD'22, 001 arXiv) and the public code leave room:

- Before the start round L = floor(start_fraction * R) (paper: 0.4 R) lambda = 0, w_l is frozen
  (not in the optimizer) and the nu term is off, so the round is exactly FedProx (arXiv version,
  phase I: the orthogonality weight is 0): it runs :mod:`fedavg`'s own loop and loss, so that
  equality is bitwise.
- mu multiplies the SQUARED distance as in eq. 4 (the public code uses an unsquared per-layer
  norm). FedProx writes (mu' / 2) ||w - w_g||^2, so SuPerFed's mu equals FedProx's mu' / 2.
- cos is ONE cosine over all parameters concatenated (public code), not a per-layer sum.
- w_l starts from its own seeded random init (000 section 3.1; Algorithm 1's "w_l <- w_g" would
  make w_f and w_l start equal, which section 3.1 rules out).
- lambda is chosen per client on a held-out ``holdout_fraction`` of its TRAIN rows, which fit
  never trains on (the public code picks it on the client's test set: an oracle, reported by
  the benchmark only as a labelled extra). Ties go to the lower NLL.
- Normalization statistics (BatchNorm in mobilenet): training uses batch statistics; the
  running statistics are updated in place during training exactly as FedAvg does, sent with w_f
  and averaged by the server, and the client keeps its own copy after each fit
  (``local.<buffer>``). At inference the float buffers are mixed like weights, so lambda = 0
  is exactly the global model and lambda = 1 uses the client's own statistics. Integer buffers
  (``num_batches_tracked``) come from the global model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pflkit.sdk.algorithms.base import (
    Choice,
    ClientState,
    FitJob,
    FitResult,
    HyperparameterError,
    RoundContext,
    State,
    register,
    shared_lr,
)
from pflkit.sdk.algorithms.fedavg import train_proximal, train_proximal_batch
from pflkit.sdk.algorithms.mixing import float_buffers
from pflkit.sdk.algorithms.personal import (  # noqa: F401 (choose_lambda: API)
    EagerSession,
    PersonalTraining,
    choose_lambda,
    choose_lambda_from,
    personalize_with,
)
from pflkit.sdk.algorithms.recipe import (
    LAMBDA_GRID,
    TRAIN_ROWS,
    LambdaInput,
    Optimizer,
    Phase,
    Recipe,
    Split,
)
from pflkit.sdk.algorithms.superfed_inference import LAMBDA, LOCAL, SuPerFedInference
from pflkit.sdk.algorithms.superfed_inference import lambda_sweep as lambda_sweep
from pflkit.sdk.algorithms.superfed_objective import (
    FlatLayout,
    LocalMixtureProgram,
    cosine,
    lambda_sampler,
    superfed_loss,
)
from pflkit.sdk.batched_training import BatchPlan, train_together
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.metrics import predict
from pflkit.sdk.models import float_state
from pflkit.sdk.seeding import derive_seed, torch_generator
from pflkit.sdk.training import Batch, run_epochs, sgd


@dataclass(frozen=True)
class SuPerFedParams:
    """SuPerFed's hyperparameters (defaults: the paper's L ablation, Table 5: nu=2, mu=0.01)."""

    mu: float = 0.01  # proximity weight on ||w_f - w_g||^2 (squared, eq. 4)
    nu: float = 2.0  # weight of cos^2(w_f, w_l), the connectivity term
    start_fraction: float = 0.4  # L = floor(start_fraction * R): mixing starts at round L
    holdout_fraction: float = 0.1  # train rows kept out of fit to choose each client's lambda
    sweep: bool = True  # after the last round, also score every grid lambda (11 evaluations)
    ft_epochs: int = 0  # epochs of local-model training after federation (0: lambda choice only)
    ft_lr: float | None = None  # its learning rate (None: the lr of the round after the last)
    ft_lambda: float | None = None  # its lambda: a fixed value, or None to draw as in fit

    def __post_init__(self) -> None:
        if self.ft_epochs < 0:
            raise HyperparameterError("superfed: hyperparameter 'ft_epochs' must be >= 0")
        if self.ft_lambda is not None and not 0.0 <= self.ft_lambda <= 1.0:
            raise HyperparameterError("superfed: hyperparameter 'ft_lambda' must be in [0, 1]")
        for name in ("mu", "nu"):
            if getattr(self, name) < 0:
                raise HyperparameterError(f"superfed: hyperparameter '{name}' must be >= 0")
        for name in ("start_fraction", "holdout_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise HyperparameterError(f"superfed: hyperparameter '{name}' must be in [0, 1]")
        if self.holdout_fraction == 1.0:
            raise HyperparameterError("superfed: 'holdout_fraction' = 1 leaves nothing to train")


class SuPerFed(SuPerFedInference):
    """The shared trainer; ``mixing`` selects model mixing or layer mixing."""

    name = "superfed"
    Params = SuPerFedParams
    params: SuPerFedParams

    # -- data split ------------------------------------------------------------------------------
    def split(self, data: LabeledTensors, seed: int, client_id: int
              ) -> tuple[LabeledTensors, LabeledTensors]:
        """(rows fit trains on, held-out rows for choosing lambda), fixed per client for the run."""
        train, held_out = self.split_rows(len(data), seed, client_id)
        return data.subset(train), data.subset(held_out)

    def split_rows(self, n: int, seed: int, client_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row indices of :meth:`split`; nothing held out: lambda is chosen on the train rows."""
        n_hold = int(self.params.holdout_fraction * n)
        if n_hold == 0:
            return torch.arange(n), torch.arange(n)
        order = torch.randperm(n, generator=torch_generator(seed, "superfed-holdout", client_id))
        return order[n_hold:].sort().values, order[:n_hold]

    def start_round(self, total_rounds: int) -> int:
        """L: the first round that mixes."""
        return math.floor(self.params.start_fraction * total_rounds)

    # -- the contract ----------------------------------------------------------------------------
    def init_client(self, client_id: int, seed: int, data: LabeledTensors) -> ClientState:
        """w_l from the client's own seeded init (different from the global model's)."""
        local = self.model_factory.build(derive_seed(seed, "superfed-local-init", client_id))
        return ClientState({LOCAL + k: v for k, v in float_state(local).items()
                            if v.is_floating_point()}, {"mixed_rounds": 0})

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """E epochs from w_f = w_g (mixing from round L on); send w_f and running statistics."""
        train, _ = self.split(data, ctx.seed, ctx.client_id)
        model = self.template(global_state)
        params = dict(model.named_parameters())
        local = {n: client_state.tensors[LOCAL + n] for n in params}
        mixing = ctx.round >= self.start_round(ctx.total_rounds)
        if mixing:
            loss, local, cos = self._fit_mixed(model, global_state, local, train, ctx)
        else:  # lambda = 0, w_l frozen, nu off: FedProx's loop and loss (mu' = 2 mu)
            loss = train_proximal(model, global_state, train, ctx, self.local, self.params.mu)
            cos = float("nan")
        return self._result(model, float_state(model), local, client_state, len(train), mixing,
                            loss, cos)

    def _result(self, model: nn.Module, update: State, local: State, client_state: ClientState,
                num_samples: int, mixing: bool, loss: float, cos: float) -> FitResult:
        """Send w_f (and running statistics); keep w_l and the client's own statistics."""
        tensors = {LOCAL + n: w.detach().clone() for n, w in local.items()}
        tensors |= {LOCAL + n: update[n].clone() for n in float_buffers(model)}
        meta = {**client_state.meta,
                "mixed_rounds": int(client_state.meta.get("mixed_rounds", 0)) + int(mixing)}
        metrics = {"train_loss": loss} | ({"cosine": cos} if mixing else {})
        return FitResult(update, ClientState(tensors, meta), num_samples, metrics)

    def _fit_mixed(self, model: nn.Module, global_state: State, local: State,
                   data: LabeledTensors, ctx: RoundContext) -> tuple[float, State, float]:
        """From L on: eq. 4 on flat w_f and w_l, both in one SGD; w_f is written back to model."""
        params = dict(model.named_parameters())
        layout = FlatLayout.of(params)
        wf = layout.flatten(params).requires_grad_()
        wl = layout.flatten(local).requires_grad_()
        wg = layout.flatten(global_state)
        draw = lambda_sampler(self.mixing, layout, ctx.generator("lambda"))
        mu, nu = self.params.mu, self.params.nu

        def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return superfed_loss(model, layout, wf, wl, wg, draw().to(wf.device), Batch(x, y),
                                 mu, nu)

        optimizer = sgd([wf, wl], ctx.lr, self.local.momentum, self.local.weight_decay)
        loss = run_epochs(optimizer, loss_fn, data, self.local.epochs, self.local.batch_size,
                          ctx.generator("batches"))
        with torch.no_grad():
            for name, value in layout.unflatten(wf).items():
                params[name].copy_(value)
            cos = float(cosine(wf, wl))
        return loss, layout.unflatten(wl.detach()), cos

    # -- several clients at once ---------------------------------------------------------------
    def fit_together(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """:meth:`fit` for several clients of one round at once, one vmapped program."""
        if len({(j.ctx.round, j.ctx.total_rounds) for j in jobs}) != 1:
            raise ValueError(f"{self.name}: a batched fit takes the clients of one round")
        trains = [self.split(j.data, j.ctx.seed, j.ctx.client_id)[0] for j in jobs]
        ctxs = [j.ctx for j in jobs]
        model = self.template(global_state)
        params = dict(model.named_parameters())
        locals_ = [{n: j.client_state.tensors[LOCAL + n] for n in params} for j in jobs]
        mixing = ctxs[0].round >= self.start_round(ctxs[0].total_rounds)
        base = float_state(model)
        if mixing:
            losses, federated, locals_, cosines = self._fit_mixed_batch(
                model, global_state, locals_, trains, ctxs, shared_lr(jobs))
        else:
            trained, losses = train_proximal_batch(model, global_state, trains, ctxs, self.local,
                                                   shared_lr(jobs), self.params.mu)
            federated = [{n: t[k] for n, t in trained.items()} for k in range(len(jobs))]
            cosines = [float("nan")] * len(jobs)
        return [self._result(model, base | {n: v.clone() for n, v in federated[k].items()},
                             locals_[k], j.client_state, len(trains[k]), mixing,
                             float(losses[k]), cosines[k])
                for k, j in enumerate(jobs)]

    def _fit_mixed_batch(self, model: nn.Module, global_state: State, locals_: list[State],
                         datas: list[LabeledTensors], ctxs: list[RoundContext], lr: float
                         ) -> tuple[torch.Tensor, list[State], list[State], list[float]]:
        """:meth:`_fit_mixed` for several clients: (losses, w_f and w_l per client, cosines)."""
        layout = FlatLayout.of(dict(model.named_parameters()))
        wg = layout.flatten(global_state)
        plan = BatchPlan.build(datas, self.local.epochs, self.local.batch_size,
                               [c.generator("batches") for c in ctxs])
        # (K, T, tensors): the draws fit makes, in its order (CPU generators, moved once)
        lams = torch.zeros(len(datas), max(plan.steps, default=0), len(layout.names))
        for k, ctx in enumerate(ctxs):
            draw = lambda_sampler(self.mixing, layout, ctx.generator("lambda"))
            for t in range(plan.steps[k]):
                lams[k, t] = draw()
        lams = lams.to(wg.device)
        mu, nu = self.params.mu, self.params.nu

        def loss(p: dict[str, torch.Tensor], batch: Batch, inputs: dict[str, torch.Tensor]
                 ) -> torch.Tensor:
            return superfed_loss(model, layout, p["wf"], p["wl"], wg, inputs["lam"], batch, mu,
                                 nu)

        start = {"wf": wg.unsqueeze(0).repeat(len(datas), 1),
                 "wl": torch.stack([layout.flatten(local) for local in locals_])}
        trained, losses = train_together(loss, start, plan, lr, self.local.momentum,
                                         self.local.weight_decay, step_inputs={"lam": lams})
        wf, wl = trained["wf"], trained["wl"]
        cosines = [float(cosine(wf[k], wl[k])) for k in range(len(datas))]
        return (losses, [layout.unflatten(w) for w in wf], [layout.unflatten(w) for w in wl],
                cosines)

    def personalize(self, global_state: State, client_state: ClientState, data: LabeledTensors,
                    ctx: RoundContext) -> ClientState:
        """Train w_l (``ft_epochs > 0``), then choose lambda on held-out train rows (``meta``)."""
        part = self.personal_training(global_state, client_state, data, ctx)
        if part is not None:
            return personalize_with(part, EagerSession(part), data)
        _, held_out = self.split(data, ctx.seed, ctx.client_id)
        chosen = choose_lambda_from(
            lambda lam: predict(self.personalized_model(global_state, client_state,
                                                        Choice({LAMBDA.name: lam})), held_out),
            held_out.y)
        return ClientState(client_state.tensors, {**client_state.meta, **chosen})

    def personal_training(self, global_state: State, client_state: ClientState,
                          data: LabeledTensors, ctx: RoundContext) -> PersonalTraining | None:
        """``ft_epochs > 0``: w_l trained against the frozen final global model w_f.

        The objective of a mixing round with w_f frozen: CE(W(lambda)) + nu cos^2(w_f, w_l)
        (mu ||w_f - w_g||^2 is the constant 0), lambda drawn per batch as in :meth:`fit` or
        fixed (``ft_lambda``). Rows as in fit; lambda is re-chosen on the held-out rows after.
        """
        p = self.params
        if p.ft_epochs == 0:
            return None
        federated, local, _ = self._endpoints(global_state, client_state)
        if float_buffers(federated):
            raise ValueError(f"{self.name}: on-device local training needs a model without "
                             f"normalization statistics ({self.model_factory.name} has them)")
        program = LocalMixtureProgram(federated, local, p.nu)
        layout = FlatLayout.of(dict(program.local.named_parameters()))
        layer, _ = layout.layers()
        trainable = tuple(n for n, _ in program.named_parameters() if n.startswith(LOCAL))
        train, held_out = self.split_rows(len(data), ctx.seed, ctx.client_id)
        recipe = Recipe(
            (Optimizer("local", trainable, ctx.lr if p.ft_lr is None else p.ft_lr,
                       self.local.momentum, self.local.weight_decay),),
            (Phase("local", purpose="superfed-final-pass"),), p.ft_epochs, self.local.batch_size,
            "cross_entropy(W(lam) logits, label) + nu * cos^2(w_f, w_l) with W(lam) = "
            f"(1 - lam) w_f + lam w_l, w_f frozen; nu = {p.nu}",
            (Split("holdout", p.holdout_fraction, "all"),),
            LambdaInput(len(trainable), None if self.mixing == "model" else
                        tuple(int(i) for i in layer), p.ft_lambda), "holdout")
        meta = {**client_state.meta, "fine_tuned_round": ctx.round}

        def finish(weights: State, chosen: dict[str, Any], losses: dict[str, float]
                   ) -> ClientState:
            return ClientState({**client_state.tensors, **weights}, {**meta, **chosen})

        return PersonalTraining(recipe, program, None, {TRAIN_ROWS: train, "holdout": held_out},
                                ctx.generator, finish)

    def evaluation_choices(self, client_state: ClientState) -> dict[str, Choice | None]:
        """Score the chosen lambda first (the headline), then every lambda of the grid."""
        grid = LAMBDA_GRID if self.params.sweep else ()
        return {"best": Choice({LAMBDA.name: "best"})} | {
            f"{lam:.1f}": Choice({LAMBDA.name: lam}) for lam in grid}


@register
class SuPerFedMM(SuPerFed):
    """SuPerFed-MM: one lambda for the whole model per mini-batch."""

    name = "superfed_mm"
    mixing = "model"


@register
class SuPerFedLM(SuPerFed):
    """SuPerFed-LM: one lambda per layer per mini-batch."""

    name = "superfed_lm"
    mixing = "layer"
