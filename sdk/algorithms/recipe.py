"""How a method's personal part is trained: the recipe both engines follow.

A :class:`Recipe` is everything about the post-federation stage a device needs besides the
program and its weights: optimizers (SGD settings per parameter group), epochs, batch size,
the phases of an epoch, how the labelled rows are split, and how lambda is fed (SuPerFed). It
travels as the model card's ``training`` section (:meth:`Recipe.to_card`), which the ExecuTorch
trainer and the Android demo's ``RecipeRunner`` read back; the eager walk is
:func:`~pflkit.sdk.algorithms.personal.run_recipe`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

TRAIN_ROWS = "train"  # the rows no split set aside
LAMBDA_GRID: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(11))


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
class Recipe:
    """Everything about the stage a device needs besides the program and its weights."""

    optimizers: tuple[Optimizer, ...]
    phases: tuple[Phase, ...]
    epochs: int
    batch_size: int
    loss: str  # the objective, in words, for the model card
    splits: tuple[Split, ...] = ()
    lam: LambdaInput | None = None
    choose_lambda_on: str | None = None  # SuPerFed: re-choose lambda on these rows afterwards
    lambda_grid: tuple[float, ...] = LAMBDA_GRID  # the lambdas that re-choice compares

    def to_card(self) -> dict[str, Any]:
        """The recipe as JSON: the model card's ``training`` section holds these keys."""
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
            "lambda_grid": list(self.lambda_grid) if self.choose_lambda_on else None,
        }

    @classmethod
    def from_card(cls, section: dict[str, Any]) -> Recipe:
        """Read the recipe back from a card's ``training`` section."""
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
            lambda_grid=tuple(section.get("lambda_grid") or LAMBDA_GRID),
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
