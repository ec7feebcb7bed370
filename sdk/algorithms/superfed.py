"""SuPerFed (Hahn, Jeong & Lee, KDD'22): a connected low-loss subspace between federated and local.

Each client holds a federated model w_f (reset to the global model every round, the only thing
sent to the server) and a local model w_l (its own seeded random init, never leaves the device).
Every mini-batch trains the mixture W(lambda) = (1 - lambda) w_f + lambda w_l with

    loss = CE(h(x; W(lambda)), y) + mu ||w_f - w_g||^2 + nu cos^2(w_f, w_l)            (eq. 4)

through ``torch.func.functional_call``: ONE backward gives w_f the gradient (1 - lambda) dCE/dW
and w_l the gradient lambda dCE/dW (eq. 5-6). Model mixing (``superfed_mm``) draws one lambda
~ U(0, 1) per batch; layer mixing (``superfed_lm``, section 3.7) one per layer (a layer = a
module owning parameters: each linear, conv and norm layer) per batch. After federation every
lambda in [0, 1] is a usable model; each client picks its own on held-out training rows.
The method composes its roles: training in :mod:`~pflkit.sdk.algorithms.superfed_training`
(the loss in :mod:`~pflkit.sdk.algorithms.superfed_objective`), the personalized model W(lambda)
(lambda resolved once, baked in or a runtime input, the card's mixture) in
:mod:`~pflkit.sdk.algorithms.superfed_inference`, the lambda choice after federation here.

Choices where the papers (000 KDD'22, 001 arXiv) and the public code leave room:

- Before the start round L = floor(start_fraction * R) (paper: 0.4 R) lambda = 0, w_l is frozen
  (not in the optimizer) and the nu term is off, so the round is exactly FedProx (arXiv version,
  phase I: the orthogonality weight is 0): it runs :mod:`fedavg`'s own loop and loss, so that
  equality is bitwise.
- mu multiplies the SQUARED distance as in eq. 4 (the public code uses an unsquared per-layer
  norm). FedProx writes (mu' / 2) ||w - w_g||^2, so SuPerFed's mu equals FedProx's mu' / 2.
- cos is ONE cosine over all parameters concatenated (public code), not a per-layer sum.
- Every parameter has a local twin and mixes, biases included: w_l is a second model of the
  same structure (000 section 3.1). The public code gives conv and linear layers one shared,
  federated bias and mixes only their weights (and norm layers' affine parameters).
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
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import torch
from pydantic import Strict

from pflkit.sdk.algorithms.base import (
    Algorithm,
    Choice,
    ClientState,
    RoundContext,
    State,
    register,
)
from pflkit.sdk.algorithms.mixing import float_buffers
from pflkit.sdk.algorithms.paramcheck import (
    Epochs,
    Fraction,
    LearningRate,
    Strength,
    in_range,
    require_unset_while_off,
)
from pflkit.sdk.algorithms.personal import (  # noqa: F401 (choose_lambda: API)
    EagerSession,
    PersonalTraining,
    choose_lambda,
    choose_lambda_from,
    personalize_with,
)
from pflkit.sdk.algorithms.personalization import Personalization
from pflkit.sdk.algorithms.recipe import LAMBDA_GRID as LAMBDA_GRID
from pflkit.sdk.algorithms.recipe import (
    TRAIN_ROWS,
    LambdaInput,
    Optimizer,
    Phase,
    Recipe,
    Split,
)
from pflkit.sdk.algorithms.superfed_inference import LAMBDA, LOCAL, SuPerFedInference
from pflkit.sdk.algorithms.superfed_inference import lambda_sweep as lambda_sweep
from pflkit.sdk.algorithms.superfed_objective import FlatLayout, LocalMixtureProgram
from pflkit.sdk.algorithms.superfed_training import SuPerFedTraining
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.metrics import predict
from pflkit.sdk.seeding import torch_generator

# a share of the train rows: 1 would leave nothing to train
Holdout = Annotated[float, Strict(), in_range(0.0, 1.0, open_high=True)]


@dataclass(frozen=True)
class SuPerFedParams:
    """SuPerFed's hyperparameters (defaults: the paper's L ablation, Table 5: nu=2, mu=0.01)."""

    mu: Strength = 0.01  # proximity weight on ||w_f - w_g||^2 (squared, eq. 4)
    nu: Strength = 2.0  # weight of cos^2(w_f, w_l), the connectivity term
    start_fraction: Fraction = 0.4  # L = floor(start_fraction * R): mixing starts at round L
    holdout_fraction: Holdout = 0.1  # train rows kept out of fit to choose each client's lambda
    sweep: bool = True  # after the last round, also score every grid lambda (11 evaluations)
    ft_epochs: Epochs = 0  # epochs of local-model training after federation (0: lambda choice only)
    ft_lr: LearningRate | None = None  # its lr (None: the lr of the round after the last)
    ft_lambda: Fraction | None = None  # its lambda: a fixed value, or None to draw as in fit

    def __post_init__(self) -> None:
        require_unset_while_off("superfed", self, "ft_epochs", "ft_lr", "ft_lambda")


class LambdaChoice(Personalization):
    """After federation: train w_l (``ft_epochs > 0``), then choose each client's lambda."""

    method: SuPerFed

    def personalize(self, global_state: State, client_state: ClientState, data: LabeledTensors,
                    ctx: RoundContext) -> ClientState:
        """Train w_l (``ft_epochs > 0``), then choose lambda on held-out train rows (``meta``)."""
        part = self.personal_training(global_state, client_state, data, ctx)
        if part is not None:
            return personalize_with(part, EagerSession(part), data)
        _, held_out = self.method.split(data, ctx.seed, ctx.client_id)
        chosen = choose_lambda_from(
            lambda lam: predict(self.method.inference.personalized_model(global_state, client_state,
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
        federated, local, _ = self.method.inference.endpoints(global_state, client_state)
        if float_buffers(federated):
            raise ValueError(f"{self.name}: on-device local training needs a model without "
                             f"normalization statistics ({self.model_factory.name} has them)")
        program = LocalMixtureProgram(federated, local, p.nu)
        layout = FlatLayout.of(dict(program.local.named_parameters()))
        layer, _ = layout.layers()
        trainable = tuple(n for n, _ in program.named_parameters() if n.startswith(LOCAL))
        train, held_out = self.method.split_rows(len(data), ctx.seed, ctx.client_id)
        recipe = Recipe(
            (Optimizer("local", trainable, ctx.lr if p.ft_lr is None else p.ft_lr,
                       self.local.momentum, self.local.weight_decay),),
            (Phase("local", purpose="superfed-final-pass"),), p.ft_epochs, self.local.batch_size,
            "cross_entropy(W(lam) logits, label) + nu * cos^2(w_f, w_l) with W(lam) = "
            f"(1 - lam) w_f + lam w_l, w_f frozen; nu = {p.nu}",
            (Split("holdout", p.holdout_fraction, "all"),),
            LambdaInput(len(trainable), None if self.method.mixing == "model" else
                        tuple(int(i) for i in layer), p.ft_lambda), "holdout")
        meta = {**client_state.meta, "fine_tuned_round": ctx.round}

        def finish(weights: State, chosen: dict[str, Any], losses: dict[str, float]
                   ) -> ClientState:
            return ClientState({**client_state.tensors, **weights}, {**meta, **chosen})

        return PersonalTraining(recipe, program, None, {TRAIN_ROWS: train, "holdout": held_out},
                                ctx.generator, finish)


class SuPerFed(Algorithm):
    """The shared roles; ``mixing`` selects model mixing or layer mixing."""

    name = "superfed"
    Params = SuPerFedParams
    params: SuPerFedParams
    mixing: ClassVar[str] = "model"
    Training = SuPerFedTraining
    Personalization = LambdaChoice
    Inference = SuPerFedInference

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
