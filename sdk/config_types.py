"""Strict value types for configuration schemas, and one-line messages for their errors.

TOML has integers, floats, strings and booleans, so a value of the wrong kind is a mistake to
report, never something to convert: ``rounds = "2"`` and ``lr = "fast"`` are refused, and so
are ``epochs = 2.0`` and ``rounds = true``. The one conversion allowed is an integer where a
float is expected (``lr = 1``). NaN and infinity are refused everywhere, and every number of a
run config has a documented range (:func:`in_range`): nothing a config says may overflow,
allocate terabytes or run for centuries.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import difflib
import logging
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, ConfigDict, Field, Strict, ValidationError

# Schemas forbid unknown keys (a typo is an error, not a silently ignored setting).
STRICT_CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False)

Int = Annotated[int, Strict()]
PositiveInt = Annotated[int, Strict(), Field(ge=1)]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]
Float = Annotated[float, Strict()]
PositiveFloat = Annotated[float, Strict(), Field(gt=0)]
NonNegativeFloat = Annotated[float, Strict(), Field(ge=0)]
Text = Annotated[str, Strict()]
Bool = Annotated[bool, Strict()]
SHOWN = 80  # characters of a bad value an error line shows


def shown(value: object) -> str:
    """``repr(value)``, cut to :data:`SHOWN` characters: an error stays one readable line."""
    if isinstance(value, int) and value.bit_length() > 4 * SHOWN:  # repr may even refuse it
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= SHOWN else f"{text[:SHOWN - 3]}..."


def in_range(low: float, high: float, *, open_low: bool = False,
             open_high: bool = False) -> AfterValidator:
    """A validator for ``Annotated[...]``: the number must lie in [low, high] (or open ends).

    Its one-line message names the whole range (``must be in (0, 10], got 1e+300``), not just
    the bound that was crossed; float bounds (``0.0``) are shown as ``0``, int bounds as ints.
    """
    bounds = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}" \
        if isinstance(low, float) else f"[{low}, {high}]"

    def check(value: float) -> float:
        inside = low <= value <= high and not (open_low and value == low) \
            and not (open_high and value == high)
        if not inside:  # NaN too: every comparison with it is False
            raise ValueError(f"must be in {bounds}, got {shown(value)}")
        return value

    return AfterValidator(check)


_STORED = contextvars.ContextVar("stored_settings", default=False)


@contextlib.contextmanager
def stored_settings() -> Iterator[None]:
    """Read configs a run stored (its config.toml, a checkpoint's copy, a server's row).

    One written before pflkit refused unused settings may hold one; it changed nothing then,
    so inside this block it reads as its default, with a warning, rather than making the run
    impossible to resume, export or report.
    """
    token = _STORED.set(True)
    try:
        yield
    finally:
        _STORED.reset(token)


def refuse_unused(config: Any, unused: dict[str, str]) -> None:
    """Refuse a setting the config's mode does not use: one declaration per setting.

    ``unused``: each setting the mode leaves unused -> why (``only executor = "ray" uses
    it``). Only a value other than the field's default is refused: the default means the
    same used or not, so a file that writes out every default (a run's config.toml) loads.
    A stored config (:func:`stored_settings`) gets the default instead.
    """
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    for name, why in unused.items():
        value, default = getattr(config, name), defaults[name]
        if value == default:
            continue
        said = f"{name} = {_toml_text(value)} has no effect: {why}"
        if _STORED.get():
            logging.getLogger(__name__).warning("a stored run config's %s; read as its "
                                                "default, %s", said, _toml_text(default))
            object.__setattr__(config, name, default)
            continue
        back = "" if default is None else f" (or give its default, {_toml_text(default)})"
        raise ValueError(f"{said}; remove it{back}")


def _toml_text(value: object) -> str:
    """A setting's value as TOML writes it (``true``, not ``True``)."""
    return str(value).lower() if isinstance(value, bool) else shown(value)


MAX_NAME = 200  # characters of a model, dataset or method name (import paths included)


def plain_name(name: str) -> bool:
    """Whether ``name`` may name code: 1 to MAX_NAME printable characters, none a space.

    Every error about a name echoes it: no newline or escape sequence gets into one.
    """
    return 0 < len(name) <= MAX_NAME and all(c.isprintable() and not c.isspace() for c in name)


def _plain_name(name: str) -> str:
    if not plain_name(name):  # its length is checked first, by Field
        raise ValueError(f"must be printable characters without spaces, got {shown(name)}")
    return name


# a built-in name, package.module:attr or an entry point (sdk/registry.py)
Name = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_NAME),
                 AfterValidator(_plain_name)]
MAX_PATH = 4096  # characters of a path (Linux's PATH_MAX)


def _path_text(path: str) -> str:
    if "\0" in path:  # no file system takes one: open() would raise "embedded null byte"
        raise ValueError("must not contain a NUL character")
    return path


PathText = Annotated[str, Strict(), Field(max_length=MAX_PATH), AfterValidator(_path_text)]
Fraction = Annotated[float, Strict(), in_range(0.0, 1.0)]  # a share
# Ranges shared by the run config, a client's task and LocalTraining (docs/simulator.md).
LearningRate = Annotated[float, Strict(), in_range(0.0, 10.0, open_low=True)]
Momentum = Annotated[float, Strict(), in_range(0.0, 1.0, open_high=True)]  # 1: never forgets
WeightDecay = Annotated[float, Strict(), in_range(0.0, 1.0)]
Epochs = Annotated[int, Strict(), in_range(0, 1000)]
BatchSize = Annotated[int, Strict(), in_range(1, 2**16)]
# numpy's legacy seed range; derive_seed turns it into the per-purpose 63-bit seeds
Seed = Annotated[int, Strict(), in_range(0, 2**32 - 1)]
MAX_ROUNDS = 100_000
MAX_CLIENTS = 100_000  # clients of one federation (and a round's sample)
Rounds = Annotated[int, Strict(), in_range(1, MAX_ROUNDS)]

_LISTED = 3  # an unknown key of a table with at most this many keys comes with all of them
# Words users write for keys our schemas abbreviate: tried before the fuzzy match.
_GLOSSARY = {"learning_rate": "lr", "learningrate": "lr"}


class ConfigError(ValueError):
    """A configuration has an unknown key or a bad value (one line naming the key)."""


_MESSAGES = {
    "extra_forbidden": "unknown key",
    "unexpected_keyword_argument": "unknown key",
    "missing": "missing",
    "missing_argument": "missing",
}


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known key ``name`` most likely meant (``learning_rate`` -> ``lr``), or None."""
    known = list(known)
    word = name.lower().replace("-", "_")
    for long, short in _GLOSSARY.items():
        word = word.replace(long, short)
    if word in known:
        return word
    match = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return match[0] if match else None


def fields_at(root: type) -> Callable[[Sequence[str]], list[str]]:
    """For :func:`describe`: the field names of the (nested) dataclass at a location in ``root``."""
    def known(loc: Sequence[str]) -> list[str]:
        node: Any = root
        for part in loc:
            hints = typing.get_type_hints(node) if dataclasses.is_dataclass(node) else {}
            node = _dataclass_in(hints.get(part))
        return [f.name for f in dataclasses.fields(node)] if dataclasses.is_dataclass(node) \
            else []
    return known


def _dataclass_in(hint: Any) -> Any:
    """The dataclass inside ``X``, ``X | None`` or ``Annotated[X, ...]`` (else None)."""
    if dataclasses.is_dataclass(hint):
        return hint
    if typing.get_origin(hint) in (Annotated, typing.Union, types.UnionType):
        return next((d for d in map(_dataclass_in, typing.get_args(hint)) if d), None)
    return None


def describe(err: ValidationError, key: Callable[[Sequence[Any]], str] = ".".join,
             known: Callable[[Sequence[str]], Iterable[str]] | None = None) -> str:
    """The first error of ``err`` as ``key: what is wrong (got value)``, on one line.

    ``key`` turns pydantic's location tuple into the name the user wrote (a TOML key, a flag);
    ``known(parent location)`` lists the keys allowed there, so an unknown key comes with the
    closest known one (``training.learning_rate: unknown key (did you mean training.lr?)``).
    """
    first = err.errors()[0]
    loc = [str(part) for part in first["loc"]]
    kind = first["type"]
    if kind in _MESSAGES:
        reason = _MESSAGES[kind]
        keys = list(known(loc[:-1])) if known and loc and reason == "unknown key" else []
        guess = closest(loc[-1], keys)
        if guess:
            reason += f" (did you mean {key([*loc[:-1], guess])}?)"
        elif 0 < len(keys) <= _LISTED:  # a small table: name all it holds ([model] name)
            reason += f" (known: {', '.join(keys)})"
    elif kind == "value_error":
        reason = str(first.get("ctx", {}).get("error", first["msg"]))
    elif kind == "dataclass_type":  # a value where a section belongs
        reason = f"must be a [{key(loc)}] table"
    else:
        msg = first["msg"]
        reason = msg[0].lower() + msg[1:]
    where = key(loc) if loc else ""
    got = "" if kind in _MESSAGES or kind == "value_error" or isinstance(first["input"], dict) \
        else f", got {shown(first['input'])}"
    more = err.error_count() - 1  # errors() builds each one: 3 s for 110 000 unknown keys
    tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    text = f"{where}: {reason}{got}{tail}" if where else f"{reason}{got}{tail}"
    return _escaped(" ".join(text.split()))


def _escaped(text: str) -> str:
    """Each unprintable character as its escape: a terminal shows a chosen key, never obeys it."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
