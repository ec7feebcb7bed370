"""FedRoD (Chen & Chao, ICLR'22): a balanced generic head and a personalized head on one body.

The body f(x; theta) gives features z; the generic head h_G(z; psi) is the generic model and
the personalized model adds a head of the same architecture at the logit level:
h_G(z) + h_P(z; phi_m) (eq. 13). One forward/backward per mini-batch minimizes (eq. 14)

    L_BR(theta, psi)  +  L_m(theta, psi, phi_m)

where L_BR is the balanced softmax (eq. 6, gamma = 1, the client's class counts) on the
generic logits and L_m is cross-entropy on the personalized logits with NO gradient into theta
or psi (App. B.2): the personalized branch sees ``z.detach()`` and ``h_G(z).detach()``.
The server averages theta and psi (eq. 10) with the usual n-weighted mean.

* ``fedrod_linear`` (Algorithm 1): phi_m stays in the client state across rounds.
* ``fedrod_hyper`` (Algorithm 2, eq. 11): a hypernetwork H(a_m; nu) (two FC layers with ReLU)
  maps the client's class proportions a_m to phi_m; nu is trained locally through L_m and
  averaged with theta and psi. A client that never trained gets a zero-shot head from its
  class distribution alone (:func:`zero_shot_head`), optionally fine-tuned on its data.

The loss is in :mod:`~pflkit.sdk.algorithms.fedrod_objective`, the hypernetwork and zero-shot
heads in :mod:`~pflkit.sdk.algorithms.fedrod_hypernet`, the modules in
:mod:`~pflkit.sdk.algorithms.fedrod_modules`; each records the choices it makes. Choices where
the paper is silent, made here (as ALGORITHMS.md asks):

* phi_m of ``fedrod_linear`` starts at zero, so a client's personalized model starts equal to
  the generic one (h_P is an "add-on" to h_G). The zero-shot head of ``fedrod_linear`` is that
  zero head: a new client gets the generic model, as in Table 4's protocol for non-hyper methods.
* Evaluation of training clients, without a post-federation pass (``ft_epochs = 0``): the final
  theta-bar and psi-bar with phi_m* (linear, App. B "plug them into eq. 13") or with
  H(a_m; nu-bar) (hyper). With ``ft_epochs > 0`` every client (new ones too) first runs one more
  local pass of eq. 14 from the final global state and is scored with that local model
  {theta_m*, psi_m*, phi_m*} (Algorithm 1's client output): the same "final global model + one
  local pass" protocol as ``fedavg_ft``, and the paper's fine-tuning of new clients (Table 4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from torch.func import functional_call

from pflkit.sdk.algorithms.base import (
    ClientState,
    FitJob,
    FitResult,
    HyperparameterError,
    RoundContext,
    State,
    register,
    shared_lr,
)
from pflkit.sdk.algorithms.fedrod_hypernet import HYPER, HyperNetwork
from pflkit.sdk.algorithms.fedrod_hypernet import zero_shot_head as zero_shot_head
from pflkit.sdk.algorithms.fedrod_inference import COUNTS, LOCAL, PHI, FedRoDInference
from pflkit.sdk.algorithms.fedrod_modules import FrozenFeatures, PersonalHeadProgram, TwoHeadNet
from pflkit.sdk.algorithms.fedrod_objective import (  # noqa: F401 (re-exported as FedRoD's API)
    ZERO_COUNT_LOG_PRIOR,
    balanced_softmax_loss,
    fedrod_loss,
    log_prior,
)
from pflkit.sdk.algorithms.personal import EagerSession, PersonalTraining, personalize_with
from pflkit.sdk.algorithms.recipe import TRAIN_ROWS, Optimizer, Phase, Recipe
from pflkit.sdk.algorithms.state_layout import strip_prefix
from pflkit.sdk.batched_training import BatchPlan, stack, train_together
from pflkit.sdk.class_distribution import ClassDistributionError as ClassDistributionError
from pflkit.sdk.class_distribution import class_proportions
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import SplitModel
from pflkit.sdk.seeding import seeded_torch
from pflkit.sdk.training import Batch, run_epochs, sgd

FT_SCOPES = ("model", "personal_head")


@dataclass(frozen=True)
class FedRoDParams:
    """FedRoD adds no hyperparameter to FedAvg's (App. C); these set the evaluation protocol."""

    gamma: float = 1.0  # BSM exponent on the class counts (fixed to 1 in the paper)
    ft_epochs: int = 0  # epochs of the post-federation local pass (0: none, see module doc)
    ft_lr: float | None = None  # its learning rate (None: the lr of the round after the last)
    ft_scope: str = "model"  # model: eq. 14 on body, heads | personal_head: L_m on phi only

    def __post_init__(self) -> None:
        if self.ft_epochs < 0:
            raise HyperparameterError("fedrod: hyperparameter 'ft_epochs' must be >= 0")
        if self.ft_scope not in FT_SCOPES:
            raise HyperparameterError(f"fedrod: hyperparameter 'ft_scope' must be one of "
                                      f"{', '.join(FT_SCOPES)}, got {self.ft_scope!r}")
        if self.gamma < 0:
            raise HyperparameterError("fedrod: hyperparameter 'gamma' must be >= 0")


@dataclass(frozen=True)
class FedRoDHyperParams(FedRoDParams):
    """Plus the hypernetwork's hidden width (16 for FMNIST/CIFAR-100, 32 for CIFAR-10)."""

    hidden: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.hidden <= 0:
            raise HyperparameterError("fedrod_hyper: hyperparameter 'hidden' must be > 0")


class FedRoD(FedRoDInference):
    """Training, shared by both variants (the nets and inference: :class:`FedRoDInference`)."""

    Params: ClassVar[type] = FedRoDParams
    params: FedRoDParams

    def init_global(self, seed: int) -> State:
        """Seeded body and generic head (as every method), plus the seeded hypernetwork."""
        state = super().init_global(seed)
        split = self.model_factory.build()
        with seeded_torch(seed, "hypernetwork-init"):
            hyper = self._hypernetwork(split)
        if hyper is not None:
            state.update({f"{HYPER}{k}": v.detach().clone() for k, v in hyper.state_dict().items()})
        return state

    # -- training -----------------------------------------------------------------------------
    def _trainable(self, net: TwoHeadNet) -> dict[str, nn.Parameter]:
        """What local training updates: body, generic head, and phi (linear) or nu (hyper)."""
        own = HYPER if self.uses_hypernetwork else "phead."
        return {n: p for n, p in net.named_parameters() if n.startswith(("body.", "head.", own))}

    def _local_loss(self, net: TwoHeadNet, params: Mapping[str, torch.Tensor], batch: Batch,
                    prior: torch.Tensor, proportions: torch.Tensor | None) -> torch.Tensor:
        """Eq. 14 on one batch, ``net`` run with the trainable weights ``params``."""
        def body(x: torch.Tensor) -> torch.Tensor:
            return functional_call(net.body, strip_prefix(params, "body."), (x,))

        def head(z: torch.Tensor) -> torch.Tensor:
            return functional_call(net.head, strip_prefix(params, "head."), (z,))

        phi = (functional_call(net.hyper, strip_prefix(params, HYPER), (proportions,))
               if self.uses_hypernetwork else strip_prefix(params, "phead."))
        l_br, l_m = fedrod_loss(body, head, net.phead, batch, prior, phi)
        return l_br + l_m

    def _start(self, global_state: State, client_state: ClientState, data: LabeledTensors
               ) -> tuple[TwoHeadNet, torch.Tensor, torch.Tensor | None]:
        """(net at the round's start, the client's log prior, its class proportions for hyper)."""
        c = self.model_factory.num_classes
        counts = data.class_counts(c)
        phi0 = None if self.uses_hypernetwork else strip_prefix(client_state.tensors, PHI) or None
        net = self._net(global_state, phi0).train()
        a = class_proportions(counts, c) if self.uses_hypernetwork else None
        return net, log_prior(counts, self.params.gamma), a

    def _finish(self, net: TwoHeadNet, proportions: torch.Tensor | None) -> None:
        """hyper: materialize phi_m = H(a_m; nu) into the personalized head."""
        if self.uses_hypernetwork:
            with torch.no_grad():
                net.phead.load_state_dict(net.hyper(proportions))

    def _train(self, global_state: State, client_state: ClientState, data: LabeledTensors,
               epochs: int, lr: float, generator: torch.Generator) -> tuple[TwoHeadNet, float]:
        """Eq. 14 for ``epochs`` epochs from the global state (and the client's phi)."""
        net, prior, a = self._start(global_state, client_state, data)
        params = self._trainable(net)
        optimizer = sgd(params.values(), lr, self.local.momentum, self.local.weight_decay)
        mean_loss = run_epochs(
            optimizer, lambda x, y: self._local_loss(net, params, Batch(x, y), prior, a), data,
            epochs, self.local.batch_size, generator)
        self._finish(net, a)
        return net, mean_loss

    def _client_state(self, net: TwoHeadNet, data: LabeledTensors, meta: dict,
                      keep: tuple[str, ...]) -> ClientState:
        """Keep phi (``"phead."`` in ``keep``) and/or the local body and head, and the counts."""
        tensors: State = {}
        for key, value in net.state_dict().items():
            if key.startswith(keep):
                name = f"{PHI}{key.removeprefix('phead.')}" if key.startswith("phead.") \
                    else f"{LOCAL}{key}"
                tensors[name] = value.detach().clone()
        counts = data.class_counts(self.model_factory.num_classes).tolist()
        return ClientState(tensors, {**meta, COUNTS: counts})

    def fit(self, global_state: State, client_state: ClientState, data: LabeledTensors,
            ctx: RoundContext) -> FitResult:
        """One round of eq. 14; send body, generic head (and hypernetwork), keep phi (linear)."""
        net, loss = self._train(global_state, client_state, data, self.local.epochs, ctx.lr,
                                ctx.generator("batches"))
        return self._fit_result(net, data, client_state, loss)

    def _fit_result(self, net: TwoHeadNet, data: LabeledTensors, client_state: ClientState,
                    loss: float) -> FitResult:
        update = {k: v.detach().clone() for k, v in net.state_dict().items()
                  if not k.startswith("phead.")}
        # hyper: phi is regenerated from nu-bar every round, so nothing private persists.
        keep = () if self.uses_hypernetwork else ("phead.",)
        new_state = self._client_state(net, data, client_state.meta, keep)
        return FitResult(update, new_state, len(data), {"train_loss": loss})

    def fit_together(self, global_state: State, jobs: Sequence[FitJob]) -> list[FitResult]:
        """:meth:`fit` for several clients of one round at once, one vmapped program."""
        starts = [self._start(global_state, j.client_state, j.data) for j in jobs]
        nets = [net for net, _, _ in starts]
        inputs = {"prior": torch.stack([prior for _, prior, _ in starts])}  # (K, C)
        if self.uses_hypernetwork:  # every client has proportions then
            inputs["a"] = torch.stack([a for _, _, a in starts if a is not None])  # (K, C)
        plan = BatchPlan.build([j.data for j in jobs], self.local.epochs, self.local.batch_size,
                               [j.ctx.generator("batches") for j in jobs])
        template = nets[0]

        def loss(p: dict[str, torch.Tensor], batch: Batch, inp: dict[str, torch.Tensor]
                 ) -> torch.Tensor:
            return self._local_loss(template, p, batch, inp["prior"], inp.get("a"))

        start = stack([{n: p.detach().clone() for n, p in self._trainable(net).items()}
                       for net in nets])
        trained, losses = train_together(loss, start, plan, shared_lr(jobs), self.local.momentum,
                                         self.local.weight_decay, client_inputs=inputs)
        results = []
        for k, ((net, _, a), job) in enumerate(zip(starts, jobs, strict=True)):
            with torch.no_grad():
                for name, param in self._trainable(net).items():
                    param.copy_(trained[name][k])
            self._finish(net, a)
            results.append(self._fit_result(net, job.data, job.client_state, float(losses[k])))
        return results

    def init_client(self, client_id: int, seed: int, data: LabeledTensors) -> ClientState:
        """No tensors yet (phi starts at zero / comes from the hypernetwork); the class counts."""
        return ClientState({}, {COUNTS: data.class_counts(self.model_factory.num_classes).tolist()})

    @property
    def has_personalization_stage(self) -> bool:
        """Only with a final local pass (``ft_epochs > 0``)."""
        return self.params.ft_epochs > 0

    def personalize(self, global_state: State, client_state: ClientState, data: LabeledTensors,
                    ctx: RoundContext) -> ClientState:
        """One more local pass of eq. 14 from the final global state; keep the local model.

        For a new client this is the paper's fine-tuning: hyper starts from its zero-shot head.
        """
        if self.params.ft_epochs == 0 or len(data) == 0:
            return client_state
        part = self.personal_training(global_state, client_state, data, ctx)
        if part is not None:
            return personalize_with(part, EagerSession(part), data)
        lr = ctx.lr if self.params.ft_lr is None else self.params.ft_lr
        net, _ = self._train(global_state, client_state, data, self.params.ft_epochs, lr,
                             ctx.generator("fedrod-final-pass"))
        return self._client_state(net, data, {**client_state.meta, "fine_tuned_round": ctx.round},
                                  ("phead.", "body.", "head."))

    def personal_training(self, global_state: State, client_state: ClientState,
                          data: LabeledTensors, ctx: RoundContext) -> PersonalTraining | None:
        """``ft_scope = "personal_head"``: L_m on phi alone, body and generic head frozen.

        phi starts from the client's own (linear), else H(a_m; nu-bar) (hyper), else zero.
        """
        p = self.params
        if p.ft_epochs == 0 or p.ft_scope != "personal_head":
            return None
        counts = data.class_counts(self.model_factory.num_classes).tolist()
        state = ClientState(client_state.tensors, {COUNTS: counts, **client_state.meta})
        net = self._net(global_state, self._phi(global_state, state),
                        strip_prefix(state.tensors, LOCAL)).eval()
        program = PersonalHeadProgram(net.phead)
        names = tuple(n for n, _ in program.named_parameters())
        lr = ctx.lr if p.ft_lr is None else p.ft_lr
        recipe = Recipe(
            (Optimizer("phi", names, lr, self.local.momentum, self.local.weight_decay),),
            (Phase("phi", purpose="fedrod-final-pass"),), p.ft_epochs, self.local.batch_size,
            "cross_entropy(generic_logits + h_P(features; phi), label): FedRoD's personalized "
            "loss L_m; body and generic head frozen")
        meta = {**state.meta, "fine_tuned_round": ctx.round}

        def finish(weights: State, chosen: dict, losses: dict[str, float]) -> ClientState:
            return ClientState({**state.tensors, **weights}, meta)

        return PersonalTraining(recipe, program, FrozenFeatures(net.body, net.head),
                                {TRAIN_ROWS: torch.arange(len(data))}, ctx.generator, finish,
                                ("features", "generic_logits"))


@register
class FedRoDLinear(FedRoD):
    """FedRoD (linear): phi_m is a private head kept on the client (Algorithm 1)."""

    name = "fedrod_linear"


@register
class FedRoDHyper(FedRoD):
    """FedRoD (hyper): phi_m = H(a_m; nu), nu trained locally and averaged (Algorithm 2)."""

    name = "fedrod_hyper"
    Params = FedRoDHyperParams
    params: FedRoDHyperParams
    uses_hypernetwork = True

    def _hypernetwork(self, split: SplitModel) -> HyperNetwork:
        """Two bias-free FC layers, class proportions -> every parameter of the head."""
        shapes = {k: p.shape for k, p in split.head.named_parameters()}
        return HyperNetwork(self.model_factory.num_classes, self.params.hidden, shapes)
