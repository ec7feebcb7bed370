"""Hyperparameters from a config: typed parsing and one wording for errors.

Every error names the method and the parameter: ``fedprox: hyperparameter 'mu': ...``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError

from pflkit.sdk.config_types import closest

# Bounds every method's numbers share (its __post_init__ narrows them): epochs, steps or widths
# beyond 10 000 run or allocate for ever, and a float beyond 1e6 only makes NaN weights.
MAX_INT = 10_000
MAX_FLOAT = 1e6


class HyperparameterError(ValueError):
    """A hyperparameter is unknown, missing, of the wrong type or out of range."""


def require(method: str, name: str, ok: bool, rule: str, value: object) -> None:
    """Raise ``HyperparameterError`` naming method and parameter unless ``ok``."""
    if not ok:
        raise HyperparameterError(
            f"{method}: hyperparameter '{name}' must be {rule}, got {value!r}"
        )


@functools.cache
def _adapter(hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(hint, config=ConfigDict(allow_inf_nan=False))


def check_finite(method: str, params: Any) -> None:
    """Refuse NaN or infinity in a Params dataclass built in Python, not from a config.

    ``mu < 0`` is False for NaN, so the methods' range checks alone would let it through.
    """
    if dataclasses.is_dataclass(params):
        for f in dataclasses.fields(params):
            value = getattr(params, f.name)
            require(method, f.name, not isinstance(value, float) or math.isfinite(value),
                    "a finite number", value)


def parse_params(algorithm: str, params_type: type, values: Mapping[str, Any]) -> Any:
    """Build ``params_type`` (a dataclass) from a config mapping, checking every value's type.

    Types are checked strictly with pydantic against the dataclass's resolved annotations: a
    string is never turned into a number (``mu = "0.1"`` is refused), an int is accepted for
    a float, NaN and infinity are refused, ints lie in [-MAX_INT, MAX_INT] and floats in
    [-MAX_FLOAT, MAX_FLOAT]. Narrower ranges stay in the dataclass's ``__post_init__``. Every
    error names the method and the parameter.
    """
    if params_type is type(None):
        if values:
            raise HyperparameterError(
                f"{algorithm}: takes no hyperparameters, got {', '.join(sorted(values))}"
            )
        return None
    fields = {f.name: f for f in dataclasses.fields(params_type) if f.init}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        guess = closest(unknown[0], fields)
        hint = f"did you mean {guess!r}?" if guess else f"known: {', '.join(fields) or 'none'}"
        raise HyperparameterError(
            f"{algorithm}: unknown hyperparameter {', '.join(map(repr, unknown))} ({hint})"
        )
    missing = [n for n, f in fields.items() if n not in values
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise HyperparameterError(f"{algorithm}: missing hyperparameter {', '.join(missing)}")
    hints = typing.get_type_hints(params_type)
    kwargs = {}
    for name, value in values.items():
        try:
            kwargs[name] = _adapter(hints[name]).validate_python(value, strict=True)
        except ValidationError as err:
            reason = err.errors()[0]["msg"]
            raise HyperparameterError(f"{algorithm}: hyperparameter '{name}': "
                                      f"{reason[0].lower()}{reason[1:]}, got {value!r}") from None
        bound = MAX_INT if isinstance(value, int) else MAX_FLOAT
        if isinstance(value, int | float) and not isinstance(value, bool):
            require(algorithm, name, abs(value) <= bound, f"in [-{bound:g}, {bound:g}]", value)
    try:
        return params_type(**kwargs)
    except HyperparameterError:
        raise
    except (TypeError, ValueError) as err:
        raise HyperparameterError(f"{algorithm}: {err}") from err
