"""A method's personal part as a trainable program: one definition, run eagerly or on a device.

The post-federation stage of FedRoD, SuPerFed and PFL-MoE trains only what never leaves the
device (a head, the local model, a gate) against frozen federated weights. An algorithm
describes that stage once as a :class:`PersonalTraining`:

* ``prepare`` (optional, frozen): images -> the tensors the trainable part reads (features,
  frozen logits), computed once per row, as a phone would;
* ``program``: ``(prepared..., label[, lam]) -> (loss, logits)``, whose parameters with
  ``requires_grad`` are the personal weights, named exactly as in the client state;
* a :class:`Plan`: optimizers (SGD settings per parameter group), epochs, batch size, the
  phases of an epoch, how the labelled rows are split, and how lambda is fed (SuPerFed).

:func:`run_plan` walks the plan against a :class:`Session`, the one interface both engines
implement: :class:`EagerSession` (PyTorch autograd and ``torch.optim``) here, and the
ExecuTorch training runtime in :mod:`pflkit.export.device_trainer`. So the eager stage and the
on-device stage are the same steps on the same rows in the same order; only the engine differs.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import torch
from torch import nn

from pflkit.sdk.algorithms.base import ClientState, State
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.metrics import Scores, scores_from_logits

TRAIN_ROWS = "train"  # the rows no split set aside
LAMBDA_GRID: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(11))
PREDICT_CHUNK = 64  # rows per logits call (the device program's largest batch)


@dataclass(frozen=True)
class Optimizer:
    """One optimizer over a group of personal parameters (the card's ``optimizers[]``)."""

    name: str
    parameters: tuple[str, ...]
    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    kind: str = "sgd"  # sgd (ExecuTorch has it) | adam (eager only: PFL-MoE's public-code gate)


@dataclass(frozen=True)
class Phase:
    """One pass over a row set per epoch, stepping one optimizer."""

    optimizer: str
    rows: str = TRAIN_ROWS
    purpose: str = "batches"  # names this phase's batch-order generator (simulation seeds)


@dataclass(frozen=True)
class Split:
    """Rows set aside from the labelled rows: a random floor(fraction * n) of them."""

    name: str
    fraction: float
    if_empty: str  # "all": use every row instead | "skip": its phases do nothing


@dataclass(frozen=True)
class LambdaInput:
    """SuPerFed's ``lam`` input: one mixing weight per trainable tensor, per batch.

    ``fixed`` set: every entry is that value. Otherwise U(0, 1) draws: one shared by every
    entry (``layer_of`` None, model mixing) or one per layer, entry i taking draw
    ``layer_of[i]`` (layer mixing).
    """

    size: int
    layer_of: tuple[int, ...] | None = None
    fixed: float | None = None

    def draw(self, gen: torch.Generator) -> torch.Tensor:
        """The ``lam`` tensor for one batch, shape (size,)."""
        if self.fixed is not None:
            return torch.full((self.size,), float(self.fixed))
        if self.layer_of is None:
            return torch.rand((), generator=gen).expand(self.size).clone()
        layers = torch.rand(max(self.layer_of) + 1, generator=gen)
        return layers[torch.tensor(self.layer_of)]

    def constant(self, value: float) -> torch.Tensor:
        """The ``lam`` tensor of the model W(value)."""
        return torch.full((self.size,), float(value))


@dataclass(frozen=True)
class Plan:
    """Everything about the stage a device needs besides the program and its weights."""

    optimizers: tuple[Optimizer, ...]
    phases: tuple[Phase, ...]
    epochs: int
    batch_size: int
    loss: str  # the objective, in words, for the model card
    splits: tuple[Split, ...] = ()
    lam: LambdaInput | None = None
    choose_lambda_on: str | None = None  # SuPerFed: re-choose lambda on these rows afterwards

    def to_card(self) -> dict[str, Any]:
        """The plan as JSON for the model card's ``training`` section."""
        return {
            "loss": self.loss,
            "optimizers": [{**asdict(o), "parameters": list(o.parameters)}
                           for o in self.optimizers],
            "schedule": {"epochs": self.epochs, "batch_size": self.batch_size,
                         "phases": [{"optimizer": p.optimizer, "rows": p.rows}
                                    for p in self.phases]},
            "splits": [asdict(s) for s in self.splits],
            "lambda": None if self.lam is None else {
                "size": self.lam.size, "fixed": self.lam.fixed,
                "layer_of": None if self.lam.layer_of is None else list(self.lam.layer_of)},
            "choose_lambda_on": self.choose_lambda_on,
            "lambda_grid": list(LAMBDA_GRID) if self.choose_lambda_on else None,
        }

    @classmethod
    def from_card(cls, section: dict[str, Any]) -> Plan:
        """Read the plan back from a card's ``training`` section."""
        sched, lam = section["schedule"], section.get("lambda")
        return cls(
            optimizers=tuple(Optimizer(**{**o, "parameters": tuple(o["parameters"])})
                             for o in section["optimizers"]),
            phases=tuple(Phase(p["optimizer"], p["rows"]) for p in sched["phases"]),
            epochs=int(sched["epochs"]), batch_size=int(sched["batch_size"]),
            loss=section["loss"], splits=tuple(Split(**s) for s in section.get("splits", [])),
            lam=None if lam is None else LambdaInput(
                int(lam["size"]), None if lam["layer_of"] is None else tuple(lam["layer_of"]),
                lam["fixed"]),
            choose_lambda_on=section.get("choose_lambda_on"),
        )

    def split_rows(self, n: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
        """Row indices per set for ``n`` labelled rows: each split a random share, the rest train.

        The device-side rule (the simulation passes the algorithm's own seeded split instead).
        """
        order, start, rows = torch.randperm(n, generator=gen), 0, {}
        for split in self.splits:
            count = math.floor(split.fraction * n)
            rows[split.name] = order[start:start + count].sort().values
            start += count
        rows[TRAIN_ROWS] = order[start:].sort().values
        for split in self.splits:
            if len(rows[split.name]) == 0 and split.if_empty == "all":
                rows[split.name] = torch.arange(n)
        return rows


@dataclass
class PersonalTraining:
    """An algorithm's post-federation stage for one client, ready for either engine.

    ``finish(weights, chosen, losses)`` turns the trained personal weights, the lambda choice's
    meta entries (empty without one) and each optimizer's last-pass loss into the new state.
    """

    plan: Plan
    program: nn.Module
    prepare: nn.Module | None
    rows: dict[str, torch.Tensor]  # the algorithm's own row split (indices into the data)
    generator: Callable[[str], torch.Generator]  # per-purpose seeded generators
    finish: Callable[[State, dict[str, Any], dict[str, float]], ClientState]
    prepared_names: tuple[str, ...] = ("image",)  # what prepare returns (or the image itself)

    def initial_weights(self) -> State:
        """The personal weights the stage starts from (the trainable parameters)."""
        return {n: p.detach().clone() for n, p in self.program.named_parameters()
                if p.requires_grad}


class Session(Protocol):
    """One engine's view of a loaded program: the only calls :func:`run_plan` makes."""

    def prepare(self, images: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The program's per-row inputs for these images (the images themselves if none)."""

    def step(self, optimizer: str, inputs: tuple[torch.Tensor, ...]) -> float:
        """One forward/backward on ``inputs`` and one step of ``optimizer``; the loss."""

    def logits(self, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The program's logits output for ``inputs``, no step taken."""

    def weights(self) -> State:
        """Copies of the current personal weights."""


class EagerSession:
    """The program trained by PyTorch autograd and ``torch.optim`` (the reference engine)."""

    def __init__(self, part: PersonalTraining) -> None:
        self.program = copy.deepcopy(part.program).train()
        self.prepare_module = None if part.prepare is None else part.prepare.eval()
        named = dict(self.program.named_parameters())
        self.optimizers = {o.name: _torch_optimizer(o, [named[n] for n in o.parameters])
                           for o in part.plan.optimizers}
        self._trainable = [p for p in self.program.parameters() if p.requires_grad]

    @torch.no_grad()
    def prepare(self, images: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Run the frozen prepare module once over all rows."""
        if self.prepare_module is None:
            return (images,)
        out = self.prepare_module(images)
        return tuple(out) if isinstance(out, tuple | list) else (out,)

    def step(self, optimizer: str, inputs: tuple[torch.Tensor, ...]) -> float:
        """Zero every gradient, backward the program's loss, step one optimizer."""
        for p in self._trainable:
            p.grad = None
        loss = self.program(*inputs)[0]
        loss.backward()
        self.optimizers[optimizer].step()
        return float(loss.detach())

    @torch.no_grad()
    def logits(self, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The program's second output."""
        return self.program(*inputs)[1]

    def weights(self) -> State:
        """The trainable parameters, detached copies."""
        return {n: p.detach().clone() for n, p in self.program.named_parameters()
                if p.requires_grad}


def _torch_optimizer(spec: Optimizer, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    if spec.kind == "adam":
        return torch.optim.Adam(params, lr=spec.lr, weight_decay=spec.weight_decay)
    return torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum,
                           dampening=spec.dampening, weight_decay=spec.weight_decay,
                           nesterov=spec.nesterov)


@dataclass(frozen=True)
class PlanResult:
    """What a walk through the plan did."""

    steps: int
    losses: dict[str, float]  # mean loss of each phase's last pass, by optimizer
    chosen: dict[str, Any]  # the lambda choice's meta entries (SuPerFed), else empty


def _phase_batches(rows: torch.Tensor, batch_size: int, gen: torch.Generator
                   ) -> Iterator[torch.Tensor]:
    """Row indices of each mini-batch of one pass (the trainers' shared batch order)."""
    order = LabeledTensors(rows, torch.zeros(len(rows), dtype=torch.long))
    for idx, _ in order.batches(batch_size, gen):
        yield idx


def choose_lambda(sweep: Mapping[float, Scores]) -> float:
    """The grid lambda with the best held-out top-1; ties go to the lower NLL."""
    return max(LAMBDA_GRID, key=lambda lam: (sweep[lam].top1, -sweep[lam].nll))


def choose_lambda_from(logits_at: Callable[[float], torch.Tensor], y: torch.Tensor
                       ) -> dict[str, Any]:
    """Choose lambda from held-out logits at each grid value; the client-state ``meta`` entries."""
    sweep = {lam: scores_from_logits(logits_at(lam), y) for lam in LAMBDA_GRID}
    best = choose_lambda(sweep)
    return {"lambda": best, "lambda_holdout_top1": sweep[best].top1,
            "lambda_holdout_rows": len(y)}


def run_plan(plan: Plan, session: Session, data: LabeledTensors, rows: dict[str, torch.Tensor],
             generator: Callable[[str], torch.Generator], max_steps: int | None = None
             ) -> PlanResult:
    """Train ``session`` through ``plan`` on ``data`` (``rows``: indices per row set).

    ``max_steps`` stops early (parity checks). A plan with ``choose_lambda_on`` then picks
    lambda on those rows (if any) from the session's own logits (:func:`choose_lambda_from`).
    """
    prepared = session.prepare(data.x)
    gens = {p.purpose: generator(p.purpose) for p in plan.phases}
    lam_gen = generator("lambda")
    steps = 0
    losses: dict[str, float] = {}  # mean loss of each optimizer's last phase
    for _ in range(plan.epochs):
        for phase in plan.phases:
            total, count = 0.0, 0
            for idx in _phase_batches(rows[phase.rows], plan.batch_size, gens[phase.purpose]):
                if max_steps is not None and steps >= max_steps:
                    if count:  # a pass cut short: the mean over its steps so far
                        losses[phase.optimizer] = total / count
                    return PlanResult(steps, losses, {})
                extra = () if plan.lam is None else (plan.lam.draw(lam_gen).to(data.x.device),)
                inputs = (*(t[idx] for t in prepared), data.y[idx], *extra)
                total += session.step(phase.optimizer, inputs)
                count, steps = count + 1, steps + 1
            if count:
                losses[phase.optimizer] = total / count
    chosen: dict[str, Any] = {}
    held = rows.get(plan.choose_lambda_on or "", torch.zeros(0, dtype=torch.long))
    if plan.lam is not None and len(held):  # no held-out rows: the client keeps its lambda
        lam_input = plan.lam

        def logits_at(value: float) -> torch.Tensor:
            lam = lam_input.constant(value).to(data.x.device)
            return torch.cat([session.logits((*(t[i] for t in prepared), data.y[i], lam))
                              for i in held.split(PREDICT_CHUNK)])

        chosen = choose_lambda_from(logits_at, data.y[held])
    return PlanResult(steps, losses, chosen)


def personalize_with(part: PersonalTraining, session: Session, data: LabeledTensors
                     ) -> ClientState:
    """Run the whole stage in ``session`` and return the client's new state."""
    result = run_plan(part.plan, session, data, part.rows, part.generator)
    return part.finish(session.weights(), result.chosen, result.losses)
