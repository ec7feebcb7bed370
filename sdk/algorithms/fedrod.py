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

Choices where the paper is silent (written here, as ALGORITHMS.md asks):

* A class with zero count gets the finite log-prior ``ZERO_COUNT_LOG_PRIOR`` (-1e4) instead of
  log 0 = -inf: numerically the N_c -> 0 limit of BSM (that class gets no softmax mass and no
  gradient) while the loss stays finite even for a label of such a class.
* phi_m of ``fedrod_linear`` starts at zero, so a client's personalized model starts equal to
  the generic one (h_P is an "add-on" to h_G). The zero-shot head of ``fedrod_linear`` is that
  zero head: a new client gets the generic model, as in Table 4's protocol for non-hyper methods.
* The hypernetwork's two FC layers have no bias: Table 6's hypernetwork sizes (8,160 for
  FMNIST = 10*16 + 16*500) count weights only. Its output is every parameter of the registry
  head, bias included, so h_P has exactly the head's architecture (any registry model).
* Evaluation of training clients, without a post-federation pass (``ft_epochs = 0``): the final
  theta-bar and psi-bar with phi_m* (linear, App. B "plug them into eq. 13") or with
  H(a_m; nu-bar) (hyper). With ``ft_epochs > 0`` every client (new ones too) first runs one more
  local pass of eq. 14 from the final global state and is scored with that local model
  {theta_m*, psi_m*, phi_m*} (Algorithm 1's client output): the same "final global model + one
  local pass" protocol as ``fedavg_ft``, and the paper's fine-tuning of new clients (Table 4).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

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
    HyperparameterError,
    RoundContext,
    State,
    register,
    shared_lr,
)
from pflkit.sdk.algorithms.inference import InferenceModel, Mixture
from pflkit.sdk.algorithms.personal import (
    TRAIN_ROWS,
    EagerSession,
    Optimizer,
    PersonalTraining,
    Phase,
    Plan,
    personalize_with,
)
from pflkit.sdk.algorithms.state_layout import add_prefix, strip_prefix
from pflkit.sdk.batched_training import BatchPlan, stack, train_together
from pflkit.sdk.class_distribution import ClassDistributionError as ClassDistributionError
from pflkit.sdk.class_distribution import class_proportions
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import SplitModel
from pflkit.sdk.seeding import seeded_torch
from pflkit.sdk.training import Batch, run_epochs, sgd

ZERO_COUNT_LOG_PRIOR = -1e4  # log N_c for a class the client never saw (finite, see docstring)
PHI = "phi."  # client-state prefix of the personalized head phi_m
LOCAL = "local."  # client-state prefix of the local body and generic head after a final pass
HYPER = "hyper."  # global-state prefix of the hypernetwork nu
COUNTS = "class_counts"  # client-state metadata: the client's train class counts
FT_SCOPES = ("model", "personal_head")


def log_prior(class_counts: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """Return gamma * log N_c per class; zero counts get ``ZERO_COUNT_LOG_PRIOR``."""
    counts = class_counts.double()
    logs = torch.where(counts > 0, counts.clamp_min(1).log(),
                       torch.full_like(counts, ZERO_COUNT_LOG_PRIOR))
    return (gamma * logs).float()


def balanced_softmax_loss(logits: torch.Tensor, y: torch.Tensor, class_counts: torch.Tensor,
                          gamma: float = 1.0) -> torch.Tensor:
    """Balanced softmax (Ren et al. 2020; FedRoD eq. 6): CE of logits + gamma * log N_c."""
    return F.cross_entropy(logits + log_prior(class_counts, gamma).to(logits.device), y)


# -- modules ---------------------------------------------------------------------------------------
def _canonical_order(names: Sequence[str]) -> list[str]:
    """Head parameter names in layer order ("4.weight" after "2.bias"), whatever dict order.

    States loaded from safetensors come in no fixed order; the hypernetwork's output layout
    and the head's class count must not depend on it.
    """
    return sorted(names, key=lambda n: [(0, int(p), "") if p.isdigit() else (1, 0, p)
                                        for p in n.split(".")])


class HyperNetwork(nn.Module):
    """H(a; nu): class proportions (C,) -> every parameter of a head, by name (eq. 11)."""

    def __init__(self, num_classes: int, hidden: int, head_shapes: dict[str, torch.Size]) -> None:
        super().__init__()
        self.shapes = {k: head_shapes[k] for k in _canonical_order(list(head_shapes))}
        self.fc1 = nn.Linear(num_classes, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, sum(math.prod(s) for s in self.shapes.values()), bias=False)

    def forward(self, proportions: torch.Tensor) -> dict[str, torch.Tensor]:
        """Return phi as a head state dict (names and shapes of the head's parameters)."""
        flat = self.fc2(F.relu(self.fc1(proportions)))  # (total head parameters,)
        sizes = [math.prod(s) for s in self.shapes.values()]
        return {name: chunk.view(shape) for (name, shape), chunk
                in zip(self.shapes.items(), flat.split(sizes), strict=True)}


class TwoHeadNet(nn.Module):
    """Shared body, generic head, personalized head: forward -> (personalized, generic) logits."""

    def __init__(self, split: SplitModel, hyper: HyperNetwork | None = None) -> None:
        super().__init__()
        self.body = split.body
        self.head = split.head
        self.phead = copy.deepcopy(split.head)
        if hyper is not None:
            self.hyper = hyper

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Personalized logits h_G(z) + h_P(z) and generic logits h_G(z), both (B, C)."""
        return self.logits_from_features(self.body(x))

    def logits_from_features(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(personalized, generic) logits from body features z (B, D)."""
        generic = self.head(z)
        return generic + self.phead(z), generic


class PersonalizedOnly(nn.Module):
    """Images in, personalized logits out (the one-output inference contract)."""

    def __init__(self, net: TwoHeadNet) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Personalized logits (B, C)."""
        return self.net(x)[0]

    @property
    def body(self) -> nn.Module:
        """The shared body f (evaluation computes its features once for every client)."""
        return self.net.body

    def head_logits(self, x: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Personalized logits from the body's features."""
        return self.net.logits_from_features(features)[0]


class FrozenFeatures(nn.Module):
    """Images in, (features z, generic logits h_G(z)) out: what the personalized head reads."""

    def __init__(self, body: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.body = body
        self.head = head

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, D) features and (B, C) generic logits."""
        z = self.body(x)
        return z, self.head(z)


class PersonalHeadProgram(nn.Module):
    """L_m on frozen inputs: phi (``phi.*``, the client-state names) is the only parameter."""

    def __init__(self, phi: nn.Module) -> None:
        super().__init__()
        self.phi = phi

    def forward(self, features: torch.Tensor, generic_logits: torch.Tensor, label: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, personalized logits h_G(z) + h_P(z)) of one batch."""
        logits = generic_logits + self.phi(features)  # (B, C)
        return F.cross_entropy(logits, label), logits.detach()


Forward = Callable[[torch.Tensor], torch.Tensor]


def fedrod_loss(body: Forward, head: Forward, phead: nn.Module, batch: Batch,
                prior: torch.Tensor, phi: Mapping[str, torch.Tensor]
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(L_BR, L_m) of one mini-batch with one body forward (eq. 14).

    ``body`` and ``head`` run the shared weights; ``prior`` is the client's log prior
    (:func:`log_prior`); ``phi`` the personalized head's parameters (the trainable ``phead``
    ones, or a hypernetwork's output), run through the ``phead`` module.
    """
    z = body(batch.x)
    generic = head(z)  # (B, C)
    l_br = batch.cross_entropy(generic + prior)
    # No gradient from the personalized loss into theta or psi (App. B.2).
    personal = generic.detach() + functional_call(phead, dict(phi), (z.detach(),))
    return l_br, batch.cross_entropy(personal)


def zero_shot_head(global_state: State, class_distribution: torch.Tensor | Sequence[float]
                   ) -> State:
    """Generate the personalized head phi of a client known only by its class distribution.

    ``class_distribution``: counts or proportions, one entry per class. With a hypernetwork
    in ``global_state`` (``fedrod_hyper``): H(a; nu-bar). Without (``fedrod_linear``): a zero
    head, i.e. the personalized model equals the generic one. Keys are the head's parameter
    names (``weight``, ``bias``, ...).
    """
    head = strip_prefix(global_state, "head.")
    if not head:
        raise ValueError("not a FedRoD global state: no 'head.*' tensors")
    hyper = strip_prefix(global_state, HYPER)
    num_classes = hyper["fc1.weight"].shape[1] if hyper else _num_classes(head)
    a = class_proportions(class_distribution, num_classes)
    if not hyper:
        return {k: torch.zeros_like(v) for k, v in head.items()}
    net = HyperNetwork(num_classes, hyper["fc1.weight"].shape[0],
                       {k: v.shape for k, v in head.items()})
    net.load_state_dict(hyper)
    with torch.no_grad():
        return {k: v.clone() for k, v in net(a).items()}


def head_query(global_state: State, body: Any) -> State:
    """The server's ``head`` query: ``{"class_distribution": [...]}`` -> :func:`zero_shot_head`."""
    if not isinstance(body, dict) or set(body) != {"class_distribution"}:
        raise ValueError('the body must be {"class_distribution": [counts or proportions]}')
    return zero_shot_head(global_state, body["class_distribution"])


def _num_classes(head: State) -> int:
    last = [k for k in _canonical_order(list(head)) if k.endswith("weight")][-1]
    return int(head[last].shape[0])


# -- the algorithm ---------------------------------------------------------------------------------
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


class FedRoD(Algorithm):
    """Shared behaviour of both variants; they differ in where phi comes from."""

    Params: ClassVar[type] = FedRoDParams
    params: FedRoDParams
    uses_hypernetwork: ClassVar[bool] = False

    def server_queries(self) -> Mapping[str, Callable[[State, Any], State]]:
        """``head``: a new client's personalized head from its class distribution alone."""
        return {"head": head_query}

    # -- model plumbing -----------------------------------------------------------------------
    def _hypernetwork(self, split: SplitModel) -> HyperNetwork | None:
        """Build the hypernetwork for ``split``'s head (variant hook; linear has none)."""
        return None

    def _net(self, global_state: State, phi: State | None = None,
             local: State | None = None) -> TwoHeadNet:
        """Build a two-head net: body and generic head from ``local`` (else global), and phi."""
        split = self.model_factory.build()
        net = TwoHeadNet(split, self._hypernetwork(split)).to(self.device)
        state = {**global_state, **(local or {})}
        phi = phi if phi is not None else {k: torch.zeros_like(v)
                                           for k, v in net.phead.state_dict().items()}
        net.load_state_dict({**state, **add_prefix(phi, "phead.")})
        return net

    def init_global(self, seed: int) -> State:
        """Seeded body and generic head (as every method), plus the seeded hypernetwork."""
        state = super().init_global(seed)
        split = self.model_factory.build()
        with seeded_torch(seed, "hypernetwork-init"):
            hyper = self._hypernetwork(split)
        if hyper is not None:
            state.update({f"{HYPER}{k}": v.detach().clone() for k, v in hyper.state_dict().items()})
        return state

    def _counts(self, client_state: ClientState) -> list[int] | None:
        return client_state.meta.get(COUNTS)

    def _phi(self, global_state: State, client_state: ClientState) -> State | None:
        """Return a trained client's phi (linear: its own; hyper: H(a_m; nu-bar)); None: zero."""
        phi = strip_prefix(client_state.tensors, PHI)
        if phi or not self.uses_hypernetwork:
            return phi or None
        counts = self._counts(client_state)
        if counts is None:
            raise ValueError(f"{self.name}: this client state has no class counts; "
                             "pass Choice(class_distribution=...) for a zero-shot head")
        return zero_shot_head(global_state, counts)

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
        if self.uses_hypernetwork:
            inputs["a"] = torch.stack([a for _, _, a in starts])  # (K, C)
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
        plan = Plan(
            (Optimizer("phi", names, lr, self.local.momentum, self.local.weight_decay),),
            (Phase("phi", purpose="fedrod-final-pass"),), p.ft_epochs, self.local.batch_size,
            "cross_entropy(generic_logits + h_P(features; phi), label): FedRoD's personalized "
            "loss L_m; body and generic head frozen")
        meta = {**state.meta, "fine_tuned_round": ctx.round}

        def finish(weights: State, chosen: dict, losses: dict[str, float]) -> ClientState:
            return ClientState({**state.tensors, **weights}, meta)

        return PersonalTraining(plan, program, FrozenFeatures(net.body, net.head),
                                {TRAIN_ROWS: torch.arange(len(data))}, ctx.generator, finish,
                                ("features", "generic_logits"))

    # -- inference ----------------------------------------------------------------------------
    def generic_and_personalized_model(self, global_state: State, client_state: ClientState,
                                       choice: Choice | None = None) -> TwoHeadNet:
        """Inference module whose forward returns ``(personalized, generic)`` logits.

        ``choice.class_distribution`` set: the zero-shot model of a client known only by that
        distribution (client tensors ignored). Otherwise the client's own model: its local
        body and head after a final pass if it has them (else the global ones) and its phi.
        """
        if choice is not None and choice.lam is not None:
            raise ValueError(f"{self.name}: takes no lambda (use class_distribution)")
        if choice is not None and choice.head != "personalized":
            raise ValueError(f"{self.name}: the generic head alone is global_model")
        if choice is not None and choice.class_distribution is not None:
            net = self._net(global_state, zero_shot_head(global_state, choice.class_distribution))
        else:
            net = self._net(global_state, self._phi(global_state, client_state),
                            strip_prefix(client_state.tensors, LOCAL))
        if self.uses_hypernetwork:
            del net.hyper  # phi is materialized: the inference module has one input, images
        return net.eval()

    def personalized_model(self, global_state: State, client_state: ClientState,
                           choice: Choice | None = None) -> nn.Module:
        """Images in, personalized logits h_G(z) + h_P(z) out."""
        return PersonalizedOnly(
            self.generic_and_personalized_model(global_state, client_state, choice)).eval()

    def inference_model(self, global_state: State, client_state: ClientState,
                        choice: Choice | None = None) -> InferenceModel:
        """Both heads' logits (``logits`` = h_G + h_P, ``generic_logits`` = h_G), or h_G alone.

        The card's choice carries the class distribution the personal head is generated from
        (given, or a hyper client's own counts), so a new client's card names it.
        """
        choice = choice or Choice()
        counts = self._counts(client_state)
        details = {"variant": "hyper" if self.uses_hypernetwork else "linear",
                   "class_counts": counts}
        if choice.head == "generic":
            return InferenceModel(self.global_model(global_state), mixture=Mixture(
                "fedrod", "the generic model h_G(f(x)): the balanced generic head alone",
                choice.to_card(), details))
        net = self.generic_and_personalized_model(global_state, client_state, choice)
        dist, own = choice.class_distribution, strip_prefix(client_state.tensors, PHI)
        if dist is not None:
            how = "generated by the hypernetwork from the given class distribution" \
                if self.uses_hypernetwork else "zero (fedrod_linear has no zero-shot head)"
        elif own:
            how = "the client's own trained head" + (
                " after a final local pass" if strip_prefix(client_state.tensors, LOCAL) else "")
        elif self.uses_hypernetwork:  # H(a_m; nu-bar) from the client's counts (new or not)
            dist, how = torch.tensor(counts), "generated by the hypernetwork from its class counts"
        else:
            how = "zero: the client never trained, so it is the generic model"
        return InferenceModel(net, ("logits", "generic_logits"), mixture=Mixture(
            "fedrod", f"h_G(f(x)) + h_P(f(x)), personal head {how}",
            Choice(class_distribution=dist).to_card(), details))

    def global_model(self, global_state: State) -> nn.Module:
        """Build the generic model h_G(f(x)) (the hypernetwork is not part of it)."""
        model = self.new_model()
        model.load_state_dict({k: v for k, v in global_state.items()
                               if k.startswith(("body.", "head."))})
        return model.eval()

    def evaluation_choices(self, client_state: ClientState) -> dict[str, Choice | None]:
        """Score the client's model; for hyper also its zero-shot model H(a_m; nu-bar)."""
        counts = self._counts(client_state)
        if not self.uses_hypernetwork or counts is None:
            return {"": None}
        return {"": None, "zero_shot": Choice(class_distribution=torch.tensor(counts))}


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
