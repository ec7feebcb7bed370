"""A method's personal part as a trainable program: one definition, run eagerly or on a device.

The post-federation stage of FedRoD, SuPerFed and PFL-MoE trains only what never leaves the
device (a head, the local model, a gate) against frozen federated weights. An algorithm
describes that stage once as a :class:`PersonalTraining`:

* ``prepare`` (optional, frozen): images -> the tensors the trainable part reads (features,
  frozen logits), computed once per row, as a phone would;
* ``program``: ``(prepared..., label[, lam]) -> (loss, logits)``, whose parameters with
  ``requires_grad`` are the personal weights, named exactly as in the client state;
* a :class:`~pflkit.sdk.algorithms.recipe.Recipe`: optimizers, epochs, batch size, phases,
  row splits, the lambda input (SuPerFed).

:func:`run_recipe` walks the recipe against a :class:`Session`, the one interface both engines
implement: :class:`EagerSession` (PyTorch autograd and ``torch.optim``) here, and the
ExecuTorch training runtime in :mod:`pflkit.export.device_trainer`. So the eager stage and the
on-device stage are the same steps on the same rows in the same order; only the engine differs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from pflkit.sdk.algorithms.base import ClientState, State
from pflkit.sdk.algorithms.recipe import LAMBDA_GRID, Optimizer, Recipe
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.metrics import Scores, scores_from_logits
from pflkit.sdk.training import forward_autocast

PREDICT_CHUNK = 64  # rows per logits call (the device program's largest batch)


@dataclass
class PersonalTraining:
    """An algorithm's post-federation stage for one client, ready for either engine.

    ``finish(weights, chosen, losses)`` turns the trained personal weights, the lambda choice's
    meta entries (empty without one) and each optimizer's last-pass loss into the new state.
    """

    recipe: Recipe
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
    """One engine's view of a loaded program: the only calls :func:`run_recipe` makes."""

    def prepare(self, images: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The program's per-row inputs for these images (the images themselves if none)."""

    def step(self, optimizer: str, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """One forward/backward on ``inputs`` and one step of ``optimizer``; the loss (0-d).

        A tensor, not a float: :func:`run_recipe` reads it once per pass, so a GPU session
        does not wait for every step (a float per step is a host sync per step).
        """

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
                           for o in part.recipe.optimizers}
        self._trainable = [p for p in self.program.parameters() if p.requires_grad]

    @torch.no_grad()
    def prepare(self, images: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Run the frozen prepare module once over all rows."""
        if self.prepare_module is None:
            return (images,)
        out = self.prepare_module(images)
        return tuple(out) if isinstance(out, tuple | list) else (out,)

    def step(self, optimizer: str, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Zero every gradient, backward the program's loss, step one optimizer."""
        for p in self._trainable:
            p.grad = None
        with forward_autocast(inputs[0].device):  # bf16 as a fit's (the stage's precision)
            loss = self.program(*inputs)[0]
        loss.backward()
        self.optimizers[optimizer].step()
        return loss.detach()

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
class RecipeResult:
    """What a walk through the recipe did."""

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
    """The swept lambda with the best held-out top-1; ties go to the lower NLL, then the first."""
    return max(sweep, key=lambda lam: (sweep[lam].top1, -sweep[lam].nll))


def choose_lambda_from(logits_at: Callable[[float], torch.Tensor], y: torch.Tensor,
                       grid: Sequence[float] = LAMBDA_GRID) -> dict[str, Any]:
    """Choose lambda from held-out logits at each grid value; the client-state ``meta`` entries."""
    sweep = {lam: scores_from_logits(logits_at(lam), y) for lam in grid}
    best = choose_lambda(sweep)
    return {"lambda": best, "lambda_holdout_top1": sweep[best].top1,
            "lambda_holdout_rows": len(y)}


def run_recipe(recipe: Recipe, session: Session, data: LabeledTensors,
               rows: dict[str, torch.Tensor], generator: Callable[[str], torch.Generator],
               max_steps: int | None = None) -> RecipeResult:
    """Train ``session`` through ``recipe`` on ``data`` (``rows``: indices per row set).

    ``max_steps`` stops early (parity checks). A recipe with ``choose_lambda_on`` then picks
    lambda on those rows (if any) from the session's own logits (:func:`choose_lambda_from`).
    """
    prepared = session.prepare(data.x)
    gens = {p.purpose: generator(p.purpose) for p in recipe.phases}
    lam_gen = generator("lambda")
    steps = 0
    losses: dict[str, float] = {}  # mean loss of each optimizer's last phase
    for _ in range(recipe.epochs):
        for phase in recipe.phases:
            total: torch.Tensor | float = 0.0  # float64 on the session's device: read per pass
            count = 0
            for idx in _phase_batches(rows[phase.rows], recipe.batch_size, gens[phase.purpose]):
                if max_steps is not None and steps >= max_steps:
                    if count:  # a pass cut short: the mean over its steps so far
                        losses[phase.optimizer] = float(total) / count
                    return RecipeResult(steps, losses, {})
                extra = () if recipe.lam is None else (recipe.lam.draw(lam_gen).to(data.x.device),)
                inputs = (*(t[idx] for t in prepared), data.y[idx], *extra)
                total = total + session.step(phase.optimizer, inputs).double()
                count, steps = count + 1, steps + 1
            if count:
                losses[phase.optimizer] = float(total) / count
    chosen: dict[str, Any] = {}
    held = rows.get(recipe.choose_lambda_on or "", torch.zeros(0, dtype=torch.long))
    if recipe.lam is not None and len(held):  # no held-out rows: the client keeps its lambda
        lam_input = recipe.lam

        def logits_at(value: float) -> torch.Tensor:
            lam = lam_input.constant(value).to(data.x.device)
            return torch.cat([session.logits((*(t[i] for t in prepared), data.y[i], lam))
                              for i in held.split(PREDICT_CHUNK)])

        chosen = choose_lambda_from(logits_at, data.y[held], recipe.lambda_grid)
    return RecipeResult(steps, losses, chosen)


def personalize_with(part: PersonalTraining, session: Session, data: LabeledTensors
                     ) -> ClientState:
    """Run the whole stage in ``session`` and return the client's new state."""
    result = run_recipe(part.recipe, session, data, part.rows, part.generator)
    return part.finish(session.weights(), result.chosen, result.losses)
