"""PFL-MoE (Guo et al. 2021): PFL-FB, PFL-MF and PFL-MFE, one class with a ``variant``.

Stage 1 is plain FedAvg on the whole model (training is FedAvg's). Stage 2 runs once per
client after federation (:meth:`Stage2.personalize`, Algorithm 2 of the paper):

1. split the client's data into D_per and D_gate with a seed kept in the client state;
2. for E epochs: one pass of SGD over D_per on a COPY of the classifier C_i with the extractor E
   frozen (PFL-FB), then (MF / MFE) one pass over D_gate on the gate only, both experts frozen;
3. inference: ``g * C(a) + (1 - g) * C_i(a)`` with ``a = E(x)`` and ``g = sigmoid(Linear(u))``,
   ``u`` = the flattened raw input x (PFL-MF, 1024-d for 32x32 grey images) or the extractor
   activations a (PFL-MFE, 400-d for LeNet-5). PFL-FB's model is ``C_i(E(x))``.

Choices where the paper and its public code differ or say nothing (the paper wins):
- Epoch schedule: the paper interleaves the two passes inside each epoch (Algorithm 2); the
  public code runs 200 classifier epochs and then 200 gate epochs. We interleave. The classifier
  passes never read the gate, so PFL-FB, -MF and -MFE of one client share the same C_i.
- Gate optimizer: the paper says SGD (lr 0.001, m 0.9, wd 5e-4); the public code uses Adam
  (lr 0.001, wd 5e-4). Default ``gate_optimizer = "sgd"``; ``"adam"`` reproduces the code.
- Split: the paper gives no ratio; the public code keeps 1/4 of the rows for D_gate
  (``gate_fraction = 0.25``, rounded down) and uses mini-batches of 64.
- Gate init: not specified; we start from zero weights and bias (g = 0.5: no preference, and
  deterministic). Mixed are the two classifiers' logits, as in eq. 15 and the public code.
- "Frozen" experts run in eval mode, so the extractor's activations are computed once per
  client and stage 2 trains only small heads (cheap on a phone); the result is the same as
  re-running a dropout/BatchNorm-free extractor every batch. Stage 2 is one
  :class:`~pflkit.sdk.algorithms.personal.PersonalTraining` (:class:`FrozenExperts` computes
  what it reads, :class:`GatedProgram` trains), so the same steps run eagerly or as an
  ExecuTorch training program on a device; ``meta["loss_<optimizer>"]`` is the program's loss
  (both terms) over the last epoch's pass of that optimizer.
- The public code's training-time augmentation (random crop / flip) is not applied.

Tiny clients (documented rule, never a crash): D_gate = floor(gate_fraction * n) rows, the rest
is D_per; mini-batches may be smaller than ``batch_size`` (one short batch). With an empty D_gate
(n < 1 / gate_fraction) the gate keeps its zero init, i.e. g = 0.5 for every input: an equal
ensemble of both experts. With no data at all C_i stays a copy of the global classifier.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Annotated, Literal, get_args

import torch
from pydantic import Strict
from torch import nn

from pflkit.sdk.algorithms.base import (
    Algorithm,
    Choice,
    ClientState,
    RoundContext,
    State,
    register,
)
from pflkit.sdk.algorithms.fedavg import FedAvgTraining
from pflkit.sdk.algorithms.inference import InferenceModel, Mixture
from pflkit.sdk.algorithms.inference_role import Inference
from pflkit.sdk.algorithms.paramcheck import (
    BatchSize,
    Epochs,
    LearningRate,
    Momentum,
    WeightDecay,
    in_range,
    require,
)
from pflkit.sdk.algorithms.personal import EagerSession, PersonalTraining, personalize_with
from pflkit.sdk.algorithms.personalization import Personalization
from pflkit.sdk.algorithms.pflmoe_modules import (
    ClassifierProgram,
    FrozenExperts,
    GatedExperts,
    GatedProgram,
)
from pflkit.sdk.algorithms.recipe import TRAIN_ROWS, Optimizer, Phase, Recipe, Split
from pflkit.sdk.algorithms.state_layout import PERSONAL, personal_of, strip_prefix
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import SplitModel
from pflkit.sdk.seeding import derive_seed, torch_generator

Variant = Literal["fb", "mf", "mfe"]
VARIANTS: tuple[str, ...] = get_args(Variant)
VARIANT_SUMMARIES = {  # the model card's one-line description of each personalized model
    "fb": "PFL-FB: the shared extractor with the client's fine-tuned classifier",
    "mf": "PFL-MF: g(x) C_global(a) + (1 - g(x)) C_personal(a), the gate on the raw input",
    "mfe": "PFL-MFE: g(a) C_global(a) + (1 - g(a)) C_personal(a), the gate on the features",
}
GateOptimizer = Literal["sgd", "adam"]
# D_gate and D_per both non-empty shares of a client's rows
GateFraction = Annotated[float, Strict(), in_range(0.0, 1.0, open_low=True, open_high=True)]
GATE = "gate."  # client-state prefix of the gate's Linear(input -> 1)
GATE_LR = 0.001  # beta when gate_lr is not given (the paper's)
GATE_OPTIMIZER: GateOptimizer = "sgd"  # when gate_optimizer is not given (the paper's)


@dataclass(frozen=True)
class PFLMoEParams:
    """Stage-2 settings; defaults are the paper's LeNet-5 / Fashion-MNIST ones (V.A.4)."""

    variant: Variant = "mfe"  # fb: personal classifier only | mf: gate on x | mfe: gate on E(x)
    epochs: Epochs = 200  # E, personalization epochs (each = one D_per pass + one D_gate pass)
    batch_size: BatchSize = 64  # stage-2 mini-batch (public code)
    head_lr: LearningRate = 0.001  # alpha, the personal classifier's SGD learning rate
    gate_lr: LearningRate | None = None  # beta, the gate's learning rate (None: GATE_LR)
    momentum: Momentum = 0.9  # SGD momentum (classifier, and gate when gate_optimizer = "sgd")
    weight_decay: WeightDecay = 5e-4  # L2 weight decay of both optimizers
    gate_fraction: GateFraction = 0.25  # share of the client's rows in D_gate (public code: 1/4)
    gate_optimizer: GateOptimizer | None = None  # sgd (paper; None) | adam (public code)

    def __post_init__(self) -> None:
        if self.variant == "fb":  # PFL-FB has no gate: its settings given there would look used
            for name in ("gate_lr", "gate_optimizer"):
                value = getattr(self, name)
                require("pflmoe", name, value is None,
                        'unset while variant = "fb" (PFL-FB has no gate)', value)


def split_for_gate(n: int, gate_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row indices (D_per, D_gate): a seeded shuffle, the first floor(fraction * n) to the gate."""
    order = torch.randperm(n, generator=torch_generator(seed, "pflmoe-split"))
    cut = math.floor(gate_fraction * n)
    return order[cut:], order[:cut]



class PFLMoETraining(FedAvgTraining):
    """Stage 1 is FedAvg; each client fixes the seed of its stage-2 split once."""

    def init_client(self, client_id: int, seed: int, data: LabeledTensors) -> ClientState:
        """Fix the split seed once, so that a re-run of stage 2 splits the same way."""
        return ClientState(meta={"split_seed": derive_seed(seed, "pflmoe-split", client_id)})


class Stage2(Personalization):
    """Stage 2 (Algorithm 2): the personal classifier C_i and (MF / MFE) the gate."""

    method: PFLMoE

    def personalize(self, global_state: State, client_state: ClientState, data: LabeledTensors,
                    ctx: RoundContext) -> ClientState:
        """Stage 2 (Algorithm 2); the global state is only read, never changed."""
        part = self.personal_training(global_state, client_state, data, ctx)
        return personalize_with(part, EagerSession(part), data)

    def personal_training(self, global_state: State, client_state: ClientState,
                          data: LabeledTensors, ctx: RoundContext) -> PersonalTraining:
        """Stage 2 as a program: C_i from a copy of C, the gate from zero, E and C frozen."""
        p = self.params
        seed = int(client_state.meta.get("split_seed", ctx.rng_seed("pflmoe-split")))
        per_idx, gate_idx = split_for_gate(len(data), p.gate_fraction, seed)
        model = self.template(global_state).eval()  # frozen extractor E and classifier C
        prepare = FrozenExperts(copy.deepcopy(model.body), copy.deepcopy(model.head), p.variant)
        head = copy.deepcopy(model.head).requires_grad_(True)
        program: ClassifierProgram
        if p.variant == "fb":
            program = ClassifierProgram(head)
        else:
            gate = nn.Linear(self.method.gate_input_dim(model), 1).to(self.device)
            nn.init.zeros_(gate.weight)
            nn.init.zeros_(gate.bias)
            program = GatedProgram(head, gate)
        names = [n for n, _ in program.named_parameters()]
        optimizers = [Optimizer("personal_head", tuple(n for n in names if n.startswith(PERSONAL)),
                                p.head_lr, p.momentum, p.weight_decay)]
        phases = [Phase("personal_head", purpose="pflmoe-classifier")]
        if p.variant != "fb":
            optimizers.append(Optimizer("gate", tuple(n for n in names if n.startswith(GATE)),
                                        p.gate_lr or GATE_LR, p.momentum, p.weight_decay,
                                        kind=p.gate_optimizer or GATE_OPTIMIZER))
            phases.append(Phase("gate", "gate", purpose="pflmoe-gate"))
        recipe = Recipe(tuple(optimizers), tuple(phases), p.epochs, p.batch_size,
                        "personal_head: cross_entropy(C_i(a), label) on the train rows; gate: "
                        "cross_entropy(g C(a) + (1 - g) C_i(a), label) with both experts frozen, "
                        "on the gate rows (the program's loss is the sum; each optimizer steps "
                        "its own term)", (Split("gate", p.gate_fraction, "skip"),))
        meta = {**client_state.meta, "split_seed": seed, "variant": p.variant,
                "gate_input": {"fb": None, "mf": "x", "mfe": "a"}[p.variant],
                "n_per": len(per_idx), "n_gate": len(gate_idx), "epochs": p.epochs,
                "personalized_round": ctx.round}

        def finish(weights: State, chosen: dict, losses: dict[str, float]) -> ClientState:
            return ClientState(dict(weights), {**meta, **{f"loss_{k}": v
                                                          for k, v in losses.items()}})

        prepared = ("features",) if p.variant == "fb" else \
            ("features", "global_logits", "gate_input")
        return PersonalTraining(recipe, program, prepare, {TRAIN_ROWS: per_idx, "gate": gate_idx},
                                ctx.generator, finish, prepared)


class PFLMoEInference(Inference):
    """The personal classifier (FB) or the gated mixture of experts (MF / MFE)."""

    method: PFLMoE

    def inference_model(self, global_state: State, client_state: ClientState,
                        choice: Choice | None = None) -> InferenceModel:
        """The personalized model of :meth:`personalized_model`, described by its variant."""
        model = super().inference_model(global_state, client_state, choice)
        if choice is not None and choice.head == "generic":
            return model
        stage2 = any(k.startswith(PERSONAL) for k in client_state.tensors)
        variant = client_state.meta.get("variant", self.params.variant)
        summary = VARIANT_SUMMARIES[variant] if stage2 else \
            "the FedAvg model: stage 2 has not run for this client"
        model.mixture = Mixture("pflmoe", summary, {}, {"variant": variant, "stage2": stage2})
        return model

    def personalized_model(self, global_state: State, client_state: ClientState,
                           choice: Choice | None = None) -> nn.Module:
        """Build the mixed model (PFL-FB: the personal classifier); global before stage 2."""
        self._reject_choice(choice)
        personal = personal_of(client_state)  # the classifier C_i, as "head.*"
        if not personal:
            return self.global_model(global_state)
        variant = client_state.meta.get("variant")
        if variant != self.params.variant:
            raise ValueError(f"pflmoe: client state was personalized as variant {variant!r}, "
                             f"this algorithm is {self.params.variant!r}")
        fb_model = self.global_model({**global_state, **personal})
        if variant == "fb":
            return fb_model
        base = self.global_model(global_state)
        gate = nn.Linear(self.method.gate_input_dim(base), 1).to(self.device)
        gate.load_state_dict(strip_prefix(client_state.tensors, GATE))
        return GatedExperts(base.body, base.head, fb_model.head, gate,
                            variant == "mfe").eval()


@register
class PFLMoE(Algorithm):
    """FedAvg, then per-client PFL-FB fine-tuning and (MF / MFE) a gated mixture of experts."""

    name = "pflmoe"
    Params = PFLMoEParams
    params: PFLMoEParams
    Training = PFLMoETraining
    Personalization = Stage2
    Inference = PFLMoEInference

    def gate_input_dim(self, model: SplitModel) -> int:
        """Gate fan-in: C*H*W for PFL-MF, the extractor's feature size for PFL-MFE."""
        if self.params.variant == "mf":
            return math.prod(self.model_factory.input_shape)
        return model.feature_dim
