"""The inference side of the algorithm contract: a user's choice -> the model a device runs.

A method declares the options its inference model takes as :class:`ChoiceSpec` entries in
its inference role's ``choices`` (:mod:`~pflkit.sdk.algorithms.inference_role`), as it
declares its hyperparameters in ``Params``. Export, the server's queries and the model card
know no method: they turn what the user asked for into a :class:`Choice` (``{name: value}``
plus the head), check it against the declaration (:func:`check_choice`), hand it to the role's
``inference_model`` and write what comes back, an :class:`InferenceModel`: the module, the
names of its outputs, an optional scalar :class:`RuntimeInput` besides the images (named like
the choice it realizes), and a :class:`Mixture` that the model card carries so that any reader
can show, and rebuild, the model without knowing the method.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from pflkit.sdk.class_distribution import parse_class_distribution

HEADS = ("personalized", "generic")
NUMBER, DISTRIBUTION = "number", "distribution"  # the kinds of value a choice takes
RUNTIME = "runtime"  # the word that makes a runtime choice an input of the model


@dataclass(frozen=True)
class ChoiceSpec:
    """One option of a method's inference model, declared like a hyperparameter.

    ``kind``: :data:`NUMBER` (a float in [low, high], or one of ``words``) or
    :data:`DISTRIBUTION` (counts or proportions, one per class). ``runtime``: the value
    ``"runtime"`` makes the choice a model input of the same name, a float clamped into
    [low, high] whose NaN means the client's default. ``default`` says what the method uses when
    the choice is not given. ``aliases``: command-line options that set it, each with the form
    its text must take (``"counts"``, ``"proportions"``, or ``""``: any). ``new_client``: the
    model is for a client known only by this value (its own state is not used).
    """

    name: str
    kind: str
    help: str
    low: float = -math.inf
    high: float = math.inf
    words: tuple[str, ...] = ()
    runtime: bool = False
    default: float | str | None = None
    aliases: tuple[tuple[str, str], ...] = ()
    new_client: bool = False

    def __post_init__(self) -> None:
        if self.kind not in (NUMBER, DISTRIBUTION):
            raise ValueError(f"choice {self.name!r}: kind must be {NUMBER!r} or "
                             f"{DISTRIBUTION!r}, got {self.kind!r}")

    @property
    def accepted(self) -> str:
        """The values it takes, in words (for errors and help)."""
        if self.kind == DISTRIBUTION:
            return "counts or proportions, one per class"
        words = [*self.words, *([RUNTIME] if self.runtime else [])]
        return f"a number in [{self.low:g}, {self.high:g}]" + "".join(
            f", {w!r}" for w in words)

    def parse(self, text: str, form: str = "") -> float | str | tuple[float, ...]:
        """Command-line text -> a checked value (``form``: an alias's, see the class)."""
        text = text.strip()
        if self.kind == DISTRIBUTION:
            proportions = form == "proportions" or (form != "counts" and "." in text)
            return self.check(parse_class_distribution(text, proportions))
        try:
            return self.check(text if text in (*self.words, RUNTIME) else float(text))
        except ValueError as err:
            raise ValueError(f"{self.name} must be {self.accepted}, got {text!r}") from err

    def runtime_input(self, default: float) -> RuntimeInput:
        """The model input this choice becomes at ``"runtime"`` (NaN reads as ``default``)."""
        if not self.runtime:
            raise ValueError(f"choice {self.name!r} is not declared runtime")
        return RuntimeInput(self.name, self.low, self.high, default, default)

    def check(self, value: Any) -> float | str | tuple[float, ...]:
        """A value of this choice, normalized (float, word, tuple of floats); else ValueError."""
        if self.kind == DISTRIBUTION:
            try:
                if _has_bool(value):  # JSON true/false are not counts
                    raise TypeError("booleans are not numbers")
                values = torch.as_tensor(value, dtype=torch.float64)
            except (TypeError, ValueError, RuntimeError, OverflowError) as err:
                raise ValueError(f"{self.name} must be {self.accepted}, got "
                                 f"{reprlib.repr(value)}") from err
            if values.dim() != 1 or not bool(torch.isfinite(values).all()) or \
                    bool((values < 0).any()) or float(values.sum()) <= 0:
                # reprlib: a query body may hold a million entries; the error stays one line
                raise ValueError(f"{self.name} must be {self.accepted}, finite, >= 0 and not "
                                 f"all zero, got {reprlib.repr(values.tolist())}")
            return tuple(float(v) for v in values.tolist())
        if isinstance(value, str) and (value in self.words or self.runtime and value == RUNTIME):
            return value
        if isinstance(value, bool) or not isinstance(value, int | float) or \
                not self.low <= value <= self.high:
            raise ValueError(f"{self.name} must be {self.accepted}, got {reprlib.repr(value)}")
        return float(value)


def _has_bool(value: Any) -> bool:
    """Whether a distribution holds booleans (torch would read True as the count 1)."""
    if isinstance(value, torch.Tensor):
        return value.dtype == torch.bool
    return isinstance(value, bool) or isinstance(value, list | tuple) and any(
        isinstance(v, bool) for v in value)


def check_choice(method: str, specs: Sequence[ChoiceSpec], choice: Choice | None
                 ) -> Choice:
    """``choice`` checked against a method's declaration, values normalized.

    An undeclared name is a ValueError naming the declared ones; so is a value out of range.
    """
    choice = choice or Choice()
    declared = {s.name: s for s in specs}
    unknown = sorted(set(choice.values) - set(declared))
    if unknown:
        offered = ", ".join(f"{s.name} ({s.accepted})" for s in specs) or "none"
        raise ValueError(f"{method} declares no choice {', '.join(map(repr, unknown))}; "
                         f"its choices: {offered}")
    try:
        values = {k: declared[k].check(v) for k, v in choice.values.items()}
    except ValueError as err:
        raise ValueError(f"{method}: {err}") from err
    return Choice(values, choice.head)


@dataclass(frozen=True)
class Choice:
    """Which model of a client to build: declared choices by name, and the head.

    ``values``: ``{name: value}`` for the :class:`ChoiceSpec` entries of the method (checked by
    :func:`check_choice`); empty: the client's default model. ``head``: ``"personalized"`` (the
    client's model) or ``"generic"`` (the shared global model, every method has one).
    """

    values: Mapping[str, Any] = field(default_factory=dict)
    head: str = "personalized"

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", dict(self.values))
        if self.head not in HEADS:
            raise ValueError(f"head must be one of {', '.join(HEADS)}, got {self.head!r}")
        if self.head == "generic" and self.values:
            raise ValueError(f"the generic model takes no choice (got "
                             f"{', '.join(sorted(self.values))})")

    def get(self, name: str, default: Any = None) -> Any:
        """The value given for ``name``, else ``default``."""
        return self.values.get(name, default)

    @property
    def given(self) -> bool:
        """Whether the choice asks for anything besides the client's default model."""
        return bool(self.values) or self.head != "personalized"

    def to_card(self) -> dict[str, Any]:
        """The entries that differ from the default, as JSON (the card's ``mixture.choice``)."""
        out: dict[str, Any] = {k: list(v) if isinstance(v, tuple | list) else v
                               for k, v in self.values.items()}
        if self.head != "personalized":
            out["head"] = self.head
        return out

    @classmethod
    def from_card(cls, choice: Mapping[str, Any]) -> Choice:
        """Inverse of :meth:`to_card`: the choice that rebuilds an exported model."""
        values = {k: tuple(v) if isinstance(v, list) else v
                  for k, v in choice.items() if k != "head"}
        return cls(values, choice.get("head", "personalized"))


@dataclass(frozen=True)
class RuntimeInput:
    """A scalar model input after the images, shape (1,) float32, named like its choice.

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
