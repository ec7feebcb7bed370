"""Strict value types for configuration schemas, and one-line messages for their errors.

TOML has integers, floats, strings and booleans, so a value of the wrong kind is a mistake to
report, never something to convert: ``rounds = "2"`` and ``lr = "fast"`` are refused, and so
are ``epochs = 2.0`` and ``rounds = true``. The one conversion allowed is an integer where a
float is expected (``lr = 1``). NaN and infinity are refused everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import ConfigDict, Field, Strict, ValidationError

# Schemas forbid unknown keys (a typo is an error, not a silently ignored setting).
STRICT_CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False)

Int = Annotated[int, Strict()]
PositiveInt = Annotated[int, Strict(), Field(ge=1)]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]
Float = Annotated[float, Strict()]
PositiveFloat = Annotated[float, Strict(), Field(gt=0)]
NonNegativeFloat = Annotated[float, Strict(), Field(ge=0)]
Fraction = Annotated[float, Strict(), Field(ge=0, le=1)]  # a share in [0, 1]
Name = Annotated[str, Strict(), Field(min_length=1)]
Text = Annotated[str, Strict()]
Bool = Annotated[bool, Strict()]

class ConfigError(ValueError):
    """A configuration has an unknown key or a bad value (one line naming the key)."""


_MESSAGES = {
    "extra_forbidden": "unknown key",
    "unexpected_keyword_argument": "unknown key",
    "missing": "missing",
    "missing_argument": "missing",
}


def describe(err: ValidationError, key: Callable[[Sequence[Any]], str] = ".".join) -> str:
    """The first error of ``err`` as ``key: what is wrong (got value)``, on one line.

    ``key`` turns pydantic's location tuple into the name the user wrote (a TOML key, a flag).
    """
    first = err.errors()[0]
    loc = [str(part) for part in first["loc"]]
    kind = first["type"]
    if kind in _MESSAGES:
        reason = _MESSAGES[kind]
    elif kind == "value_error":
        reason = str(first.get("ctx", {}).get("error", first["msg"]))
    else:
        msg = first["msg"]
        reason = msg[0].lower() + msg[1:]
    where = key(loc) if loc else ""
    shown = "" if kind in _MESSAGES or kind == "value_error" or isinstance(first["input"], dict) \
        else f", got {first['input']!r}"
    more = len(err.errors()) - 1
    tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    text = f"{where}: {reason}{shown}{tail}" if where else f"{reason}{shown}{tail}"
    return " ".join(text.split())
