"""Hyperparameters: one declaration per setting, typed parsing and one wording for errors.

A method's ``Params`` is a frozen dataclass whose annotations ARE the declaration: type, range
and choices in one place (``ft_lr: LearningRate | None = None``, ``mu: Strength = 0.01``,
``variant: Literal["fb", "mf", "mfe"]``), checked the same way from a config, from
``pfl-export --trainer-param`` and for a ``Params`` built in Python. Every error is one line that
names the method, the parameter and, for a number, its whole range:
``fedavg_ft: hyperparameter 'ft_lr' must be in (0, 10], got -1.0``.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import ConfigDict, Strict, TypeAdapter, ValidationError

# The declaration vocabulary, imported from here by the methods (and methods of your own):
# [training]'s ranges, so that a method's own stage takes what the run config takes.
from pflkit.sdk.config_types import BatchSize as BatchSize  # [1, 65536]
from pflkit.sdk.config_types import Epochs as Epochs  # [0, 1000]
from pflkit.sdk.config_types import Fraction as Fraction  # [0, 1]
from pflkit.sdk.config_types import LearningRate as LearningRate  # (0, 10]
from pflkit.sdk.config_types import Momentum as Momentum  # [0, 1)
from pflkit.sdk.config_types import WeightDecay as WeightDecay  # [0, 1]
from pflkit.sdk.config_types import closest, shown
from pflkit.sdk.config_types import in_range as in_range

# Bounds of a number a Params leaves undeclared (a plain ``int`` or ``float``, e.g. in an
# extension's method): epochs, steps or widths beyond 10 000 run or allocate for ever, and a
# float beyond 1e6 only makes NaN weights. The built-in methods declare every number's range.
MAX_INT = 10_000
MAX_FLOAT = 1e6

NAMED = 3  # unknown names an error line shows; the rest are counted (110 000 keys: one line)

# Ranges of the methods' own (their docs state them).
Strength = Annotated[float, Strict(), in_range(0.0, MAX_FLOAT)]  # a loss weight: 0 turns it off
PositiveStrength = Annotated[float, Strict(), in_range(0.0, MAX_FLOAT, open_low=True)]
Steps = Annotated[int, Strict(), in_range(1, MAX_INT)]  # inner steps, widths


class HyperparameterError(ValueError):
    """A hyperparameter is unknown, missing, of the wrong type or out of range.

    ``detail`` is a rule's message without the method's name: methods that share a ``Params``
    (superfed_mm and superfed_lm) name their family there, and :func:`parse_params`, which
    knows the registered name, puts that in front instead.
    """

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


def require(method: str, name: str, ok: bool, rule: str, value: object) -> None:
    """Raise ``HyperparameterError`` naming method and parameter unless ``ok``.

    For rules no annotation can state (one setting against another, or against the run).
    """
    if not ok:
        detail = f"hyperparameter '{name}' must be {rule}, got {shown(value)}"
        raise HyperparameterError(f"{method}: {detail}", detail)


def require_stable_pull(method: str, name: str, strength: float, local: Any, lr: float) -> None:
    """Refuse a pull (``strength`` * (w - anchor) added to the gradient) SGD amplifies.

    Along a direction the loss leaves flat, heavy-ball SGD with momentum m on curvature
    ``strength + weight_decay`` diverges once ``lr`` times it reaches 2 (1 + m). Where weight
    decay alone does (no room left), that is ``[training]``'s matter, as for every method.
    """
    limit = 2 * (1 + local.momentum) / lr - local.weight_decay
    require(method, name, limit <= 0 or strength < limit,
            f"< 2 (1 + momentum) / lr - weight_decay = {limit:.6g} (lr {lr:g}, momentum "
            f"{local.momentum:g}, weight_decay {local.weight_decay:g}: stronger, SGD's steps "
            f"diverge)", strength)


def require_unset_while_off(method: str, params: object, switch: str, *names: str) -> None:
    """Refuse each of ``names`` given while the epochs setting ``switch`` is 0.

    They set a stage only those epochs run (``ft_lr`` with ``ft_epochs = 0``): ignored, a value
    given there would look used. Their default is None, so only a value given is refused.
    """
    if getattr(params, switch) == 0:
        for name in names:
            value = getattr(params, name)
            require(method, name, value is None,
                    f"unset while {switch} = 0 (it acts only with {switch} > 0)", value)


@functools.cache
def _adapter(hint: Any) -> TypeAdapter[Any]:
    """One validator per declaration, built once (building one takes milliseconds)."""
    return TypeAdapter(hint, config=ConfigDict(allow_inf_nan=False, arbitrary_types_allowed=True))


def _declares_range(hint: Any) -> bool:
    """Whether ``hint`` (or a member of its union) carries its own validators (``Annotated``)."""
    if typing.get_origin(hint) is Annotated:
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(map(_declares_range, typing.get_args(hint)))
    return False


def check_value(method: str, name: str, hint: Any, value: Any) -> Any:
    """``value`` checked against the declaration ``hint``: the validated value, or one error.

    Strict: a string is never read as a number nor a bool as an int; an int is accepted for a
    float; NaN and infinity are refused. A number ``hint`` gives no range of its own lies in
    [-MAX_INT, MAX_INT] (ints) or [-MAX_FLOAT, MAX_FLOAT] (floats).
    """
    try:
        checked = _adapter(hint).validate_python(value, strict=True)
    except ValidationError as err:
        first = err.errors()[0]
        if first["type"] == "value_error":  # a declared range: "must be in [a, b], got v"
            rule = first.get("ctx", {}).get("error", first["msg"])
            raise HyperparameterError(f"{method}: hyperparameter '{name}' {rule}") from None
        reason = first["msg"]
        raise HyperparameterError(f"{method}: hyperparameter '{name}': "
                                  f"{reason[0].lower()}{reason[1:]}, got {shown(value)}") from None
    if isinstance(value, int | float) and not isinstance(value, bool) \
            and not _declares_range(hint):
        bound = MAX_INT if isinstance(value, int) else MAX_FLOAT
        require(method, name, abs(value) <= bound, f"in [-{bound:g}, {bound:g}]", value)
    return checked


def check_declared(method: str, params: Any) -> None:
    """Check every field of a ``Params`` (built in Python, or defaults) against its declaration.

    ``mu < 0`` is False for NaN, so a range test in ``__post_init__`` alone would let it
    through; the declaration refuses it wherever the dataclass was built.
    """
    if dataclasses.is_dataclass(params):
        hints = typing.get_type_hints(type(params), include_extras=True)
        for f in dataclasses.fields(params):
            check_value(method, f.name, hints[f.name], getattr(params, f.name))


def meets_declaration(method: str, params: Any) -> bool:
    """Whether every field of ``params`` meets its declaration, for rules between settings.

    A ``__post_init__`` checks such a rule only then: a value its declaration refuses (NaN, a
    string) gets the declaration's error where the method is built, not a rule's about it.
    """
    try:
        check_declared(method, params)
    except HyperparameterError:
        return False
    return True


def _named(names: list[str]) -> str:
    """The first :data:`NAMED` of ``names``, each cut to one readable repr, then a count."""
    more = len(names) - NAMED
    return ", ".join(map(shown, names[:NAMED])) + (f" (and {more} more)" if more > 0 else "")


def parse_params(algorithm: str, params_type: type, values: Mapping[str, Any]) -> Any:
    """Build ``params_type`` (a dataclass) from a config mapping, checking every value.

    Each value is checked by :func:`check_value` against its annotation; rules between
    settings stay in the dataclass's ``__post_init__``. Every error names the method and the
    parameter.
    """
    if params_type is type(None):
        if values:
            raise HyperparameterError(f"{algorithm}: takes no hyperparameters, got "
                                      f"{_named(sorted(values))}")
        return None
    fields = {f.name: f for f in dataclasses.fields(params_type) if f.init}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        guess = closest(unknown[0], fields)
        hint = f"did you mean {guess!r}?" if guess else f"known: {', '.join(fields) or 'none'}"
        raise HyperparameterError(
            f"{algorithm}: unknown hyperparameter {_named(unknown)} ({hint})"
        )
    missing = [n for n, f in fields.items() if n not in values
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise HyperparameterError(f"{algorithm}: missing hyperparameter {', '.join(missing)}")
    hints = typing.get_type_hints(params_type, include_extras=True)
    kwargs = {name: check_value(algorithm, name, hints[name], value)
              for name, value in values.items()}
    try:
        params = params_type(**kwargs)
    except HyperparameterError as err:
        if err.detail is None:
            raise
        raise HyperparameterError(f"{algorithm}: {err.detail}", err.detail) from None
    except (TypeError, ValueError) as err:
        raise HyperparameterError(f"{algorithm}: {err}") from err
    check_declared(algorithm, params)  # the defaults too: a declaration holds for every value
    return params
