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

The method composes its roles: training in :mod:`~pflkit.sdk.algorithms.fedrod_training`,
inference (the nets' heads, export, evaluation variants) in
:mod:`~pflkit.sdk.algorithms.fedrod_inference`, the server's init and ``head`` query and the
final pass here. The loss is in :mod:`~pflkit.sdk.algorithms.fedrod_objective`, the
hypernetwork and zero-shot heads in :mod:`~pflkit.sdk.algorithms.fedrod_hypernet`, the modules
in :mod:`~pflkit.sdk.algorithms.fedrod_modules`; each records the choices it makes. Choices where
the paper is silent, made here (as ALGORITHMS.md asks):

* phi_m of ``fedrod_linear`` starts with h_P(z) = 0, so a client's personalized model starts
  equal to the generic one (h_P is an "add-on" to h_G): a one-layer head (the paper's FC) starts
  at zero; a deeper head (lenet5's) keeps its seeded init and only its output layer starts at
  zero, since zeros throughout would let it learn nothing but its last bias
  (:func:`~pflkit.sdk.algorithms.fedrod_modules.initial_phi`). The zero-shot head of
  ``fedrod_linear`` gives that same h_P = 0: a new client gets the generic model, as in Table
  4's protocol for non-hyper methods.
* Evaluation of training clients, without a post-federation pass (``ft_epochs = 0``): the final
  theta-bar and psi-bar with phi_m* (linear, App. B "plug them into eq. 13") or with
  H(a_m; nu-bar) (hyper). With ``ft_epochs > 0`` every client (new ones too) first runs one more
  local pass of eq. 14 from the final global state and is scored with that local model
  {theta_m*, psi_m*, phi_m*} (Algorithm 1's client output): the same "final global model + one
  local pass" protocol as ``fedavg_ft``, and the paper's fine-tuning of new clients (Table 4).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from pflkit.sdk.algorithms.base import (
    Algorithm,
    ClientState,
    RoundContext,
    State,
    register,
)
from pflkit.sdk.algorithms.fedrod_hypernet import (
    CLASS_DISTRIBUTION,
    HYPER,
    HyperNetwork,
    head_query,
)
from pflkit.sdk.algorithms.fedrod_hypernet import zero_shot_head as zero_shot_head
from pflkit.sdk.algorithms.fedrod_inference import COUNTS, LOCAL, PHI, FedRoDInference
from pflkit.sdk.algorithms.fedrod_modules import (
    FrozenFeatures,
    PersonalHeadProgram,
    TwoHeadNet,
    initial_phi,
)
from pflkit.sdk.algorithms.fedrod_objective import (  # noqa: F401 (re-exported as FedRoD's API)
    ZERO_COUNT_LOG_PRIOR,
    balanced_softmax_loss,
    fedrod_loss,
    log_prior,
)
from pflkit.sdk.algorithms.fedrod_training import FedRoDTraining
from pflkit.sdk.algorithms.paramcheck import (
    Epochs,
    LearningRate,
    Steps,
    Strength,
    require_unset_while_off,
)
from pflkit.sdk.algorithms.personal import EagerSession, PersonalTraining, personalize_with
from pflkit.sdk.algorithms.personalization import Personalization
from pflkit.sdk.algorithms.recipe import TRAIN_ROWS, Optimizer, Phase, Recipe
from pflkit.sdk.algorithms.server_aggregation import ServerAggregation
from pflkit.sdk.algorithms.state_layout import add_prefix, strip_prefix
from pflkit.sdk.class_distribution import ClassDistributionError as ClassDistributionError
from pflkit.sdk.class_distribution import class_proportions as class_proportions
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import SplitModel
from pflkit.sdk.seeding import seeded_torch

FtScope = Literal["model", "personal_head"]


@dataclass(frozen=True)
class FedRoDParams:
    """FedRoD adds no hyperparameter to FedAvg's (App. C); these set the evaluation protocol."""

    gamma: Strength = 1.0  # BSM exponent on the class counts (fixed to 1 in the paper)
    ft_epochs: Epochs = 0  # epochs of the post-federation local pass (0: none, see module doc)
    ft_lr: LearningRate | None = None  # its lr (None: the lr of the round after the last)
    ft_scope: FtScope | None = None  # model (None) eq. 14 on body, heads | personal_head: phi

    def __post_init__(self) -> None:
        require_unset_while_off("fedrod", self, "ft_epochs", "ft_lr", "ft_scope")


@dataclass(frozen=True)
class FedRoDHyperParams(FedRoDParams):
    """Plus the hypernetwork's hidden width (16 for FMNIST/CIFAR-100, 32 for CIFAR-10)."""

    hidden: Steps = 16


class FedRoDAggregation(ServerAggregation):
    """The weighted mean of body, generic head (and nu); the ``head`` query for new clients."""

    method: FedRoD

    def init_global(self, seed: int) -> State:
        """Seeded body and generic head (as every method), plus the seeded hypernetwork."""
        state = super().init_global(seed)
        split = self.model_factory.build()
        with seeded_torch(seed, "hypernetwork-init"):
            hyper = self.method.hypernetwork(split)
        if hyper is not None:
            state.update({f"{HYPER}{k}": v.detach().clone() for k, v in hyper.state_dict().items()})
        return state

    def queries(self) -> Mapping[str, Callable[[State, Any], State]]:
        """``head``: a new client's personalized head from its class distribution alone."""
        return {"head": self.head}

    def head(self, global_state: State, body: Any) -> State:
        """The ``head`` query on this method's head (its parameters; buffers are not generated)."""
        return head_query(global_state, body, self.method.head_parameters())


class FedRoDFinalPass(Personalization):
    """The post-federation local pass (``ft_epochs > 0``): eq. 14, or L_m on phi alone."""

    method: FedRoD

    @property
    def has_stage(self) -> bool:
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
        training = self.method.training
        net, _ = training.train(global_state, client_state, data, self.params.ft_epochs, lr,
                                ctx.generator("fedrod-final-pass"))
        meta = {**client_state.meta, "fine_tuned_round": ctx.round}
        return training.client_state_of(net, data, meta, ("phead.", "body.", "head."))

    def personal_training(self, global_state: State, client_state: ClientState,
                          data: LabeledTensors, ctx: RoundContext) -> PersonalTraining | None:
        """``ft_scope = "personal_head"``: L_m on phi alone, body and generic head frozen.

        phi starts from the client's own (linear), else H(a_m; nu-bar) (hyper), else h_P = 0.
        """
        p = self.params
        if p.ft_epochs == 0 or p.ft_scope != "personal_head":
            return None
        counts = data.class_counts(self.model_factory.num_classes).tolist()
        state = ClientState(client_state.tensors, {COUNTS: counts, **client_state.meta})
        net = self.method.net(global_state, self.method.phi(global_state, state),
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


class FedRoD(Algorithm):
    """Both variants' roles and nets; the variants differ in phi's origin."""

    Params: ClassVar[type] = FedRoDParams
    params: FedRoDParams
    uses_hypernetwork: ClassVar[bool] = False
    Training = FedRoDTraining
    Aggregation = FedRoDAggregation
    Personalization = FedRoDFinalPass
    Inference = FedRoDInference

    def hypernetwork(self, split: SplitModel) -> HyperNetwork | None:
        """Build the hypernetwork for ``split``'s head (variant hook; linear has none)."""
        return None

    def net(self, global_state: State, phi: State | None = None,
            local: State | None = None) -> TwoHeadNet:
        """Build a two-head net: body and generic head from ``local`` (else global), and phi.

        No phi: :func:`initial_phi` (h_P(z) = 0, the personalized model is the generic one).
        """
        split = self.model_factory.build()
        net = TwoHeadNet(split, self.hypernetwork(split)).to(self.device)
        state = {**global_state, **(local or {})}
        phi = phi if phi is not None else initial_phi(net.phead)
        # A generated phi is parameters only (eq. 11): h_P's buffers are h_G's.
        buffers = {f"phead.{n}": state[f"head.{n}"] for n, _ in net.phead.named_buffers()}
        net.load_state_dict({**state, **buffers, **add_prefix(phi, "phead.")})
        return net

    def head_parameters(self) -> tuple[str, ...]:
        """The head's parameter names: what the hypernetwork generates (not its buffers)."""
        return tuple(n for n, _ in self.model_factory.build().head.named_parameters())

    def counts(self, client_state: ClientState) -> list[int] | None:
        """The client's train class counts, if its state records them."""
        return client_state.meta.get(COUNTS)

    def phi(self, global_state: State, client_state: ClientState) -> State | None:
        """A trained client's phi (linear: its own; hyper: H(a_m; nu-bar)); None: h_P = 0."""
        phi = strip_prefix(client_state.tensors, PHI)
        if phi or not self.uses_hypernetwork:
            return phi or None
        counts = self.counts(client_state)
        if counts is None:
            raise ValueError(f"{self.name}: this client state has no class counts; "
                             f"choose {CLASS_DISTRIBUTION.name} for a zero-shot head")
        return zero_shot_head(global_state, counts, self.head_parameters())


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

    def hypernetwork(self, split: SplitModel) -> HyperNetwork:
        """Two bias-free FC layers, class proportions -> every parameter of the head."""
        shapes = {k: p.shape for k, p in split.head.named_parameters()}
        return HyperNetwork(self.model_factory.num_classes, self.params.hidden, shapes)
