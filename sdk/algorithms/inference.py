"""The inference side of the algorithm contract: a user's choice -> the model a device runs.

Export knows no algorithm. It turns what the user asked for into a :class:`Choice`, hands it
to :meth:`Algorithm.inference_model <pflkit.sdk.algorithms.base.Algorithm.inference_model>`
and writes what comes back, an :class:`InferenceModel`: the module, the names of its outputs,
an optional scalar :class:`RuntimeInput` besides the images, and a :class:`Mixture` that the
model card carries so that any reader can show, and rebuild, the model without knowing the
method.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

HEADS = ("personalized", "generic")


@dataclass(frozen=True)
class Choice:
    """Which model of a client to build (fields a method does not use must stay None).

    ``lam``: a mixing weight in [0, 1], ``"best"`` (the client's chosen one) or ``"runtime"``
    (lambda becomes a model input). ``class_distribution``: counts or proportions for a
    client known only by its classes (FedRoD-hyper zero-shot). ``head``: ``"personalized"``
    (the client's model) or ``"generic"`` (the shared global model, every method has one).
    """

    lam: float | str | None = None
    class_distribution: torch.Tensor | None = None
    head: str = "personalized"

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ValueError(f"head must be one of {', '.join(HEADS)}, got {self.head!r}")
        if self.head == "generic" and (self.lam is not None
                                       or self.class_distribution is not None):
            raise ValueError("the generic model takes no lambda or class distribution")

    @property
    def given(self) -> bool:
        """Whether the choice asks for anything besides the client's default model."""
        return self.lam is not None or self.class_distribution is not None or \
            self.head != "personalized"

    def to_card(self) -> dict[str, Any]:
        """The fields that differ from the default, as JSON (the card's ``mixture.choice``)."""
        out: dict[str, Any] = {}
        if self.lam is not None:
            out["lambda"] = self.lam
        if self.class_distribution is not None:
            out["class_distribution"] = [float(v) for v in self.class_distribution.tolist()]
        if self.head != "personalized":
            out["head"] = self.head
        return out

    @classmethod
    def from_card(cls, choice: dict[str, Any]) -> Choice:
        """Inverse of :meth:`to_card`: the choice that rebuilds an exported model."""
        dist = choice.get("class_distribution")
        return cls(choice.get("lambda"), None if dist is None else torch.tensor(dist),
                   choice.get("head", "personalized"))


@dataclass(frozen=True)
class RuntimeInput:
    """A scalar model input after the images, shape (1,) float32 (SuPerFed's ``lam``).

    The module must clamp it into [low, high] and read NaN as ``nan`` in its own graph; export
    verifies both in every artifact and writes these fields into the card's input entry.
    """

    name: str
    low: float
    high: float
    default: float  # where an app starts; export's headline numbers use it
    nan: float

    def to_card(self) -> dict[str, Any]:
        """The extra keys of the card's input entry."""
        return {"range": [self.low, self.high], "default": self.default, "nan": self.nan}


@dataclass(frozen=True)
class Mixture:
    """The model card's description of how a model is personalized (``mixture``).

    ``kind`` names the method family, ``summary`` says in one line what the model computes,
    ``choice`` is the resolved :class:`Choice` (:meth:`Choice.to_card`) that rebuilds exactly
    this model from the same weights ("best" becomes the number, a new client's class counts
    appear), ``details`` holds method-specific facts. Readers need no list of kinds.
    """

    kind: str
    summary: str
    choice: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def to_card(self) -> dict[str, Any]:
        """The card's ``mixture`` object."""
        return {"kind": self.kind, "summary": self.summary, "choice": dict(self.choice),
                "details": dict(self.details)}


@dataclass
class InferenceModel:
    """What export writes for one choice: ``module(images[, runtime input]) -> logits``.

    ``outputs`` names the module's outputs in return order (logits, shape (batch, classes));
    ``quantizable`` is False when the weights are computed from the runtime input in the
    graph, which int8 cannot represent.
    """

    module: nn.Module
    outputs: tuple[str, ...] = ("logits",)
    runtime_input: RuntimeInput | None = None
    mixture: Mixture | None = None
    quantizable: bool = True


def describe_choice(kind: str, choice: Choice) -> Mixture | None:
    """A plain description of a given choice (None for the default model)."""
    if not choice.given:
        return None
    if choice.head == "generic":
        return Mixture(kind, "the generic (global) model", choice.to_card())
    asked = ", ".join(f"{k} = {v}" for k, v in choice.to_card().items())
    return Mixture(kind, f"the personalized model with {asked}", choice.to_card())
