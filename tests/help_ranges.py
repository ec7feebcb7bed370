"""The ranges a command's ``--help`` states, and the values at and past each stated bound.

A first-time user reads the ranges in ``--help``: each int or float option of a ``pfl-*``
command must state one, and each stated bound must be exactly where the validation draws it.
The command's own test runs each case of :func:`bound_cases` through its real command line.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Callable

from typer.models import OptionInfo

RANGE = re.compile(r"([\[(])([-+.\w]+), ([-+.\w]+)([\])])")  # [a, b], (a, b], [a, b)


def number_options(command: Callable[..., object]) -> dict[str, tuple[str, str]]:
    """``--flag`` -> ("integer" or "float", its help) for every number option of a typer command."""
    found = {}
    for name, hint in typing.get_type_hints(command, include_extras=True).items():
        if typing.get_origin(hint) is not typing.Annotated:
            continue
        kind, info = typing.get_args(hint)[0], typing.get_args(hint)[1]
        numbers = [t for t in (typing.get_args(kind) or (kind,)) if t in (int, float)]
        if isinstance(info, OptionInfo) and numbers:
            flag = info.param_decls[0] if info.param_decls else f"--{name.replace('_', '-')}"
            found[flag] = ("integer" if numbers[0] is int else "float", info.help or "")
    return found


def without_range(command: Callable[..., object]) -> list[str]:
    """The number options whose help states no range."""
    return [flag for flag, (_, text) in number_options(command).items() if not RANGE.search(text)]


def outside(value: float, kind: str, below: bool) -> float:
    """The nearest value past a bound: the next integer, or a relative nudge of a float."""
    if kind == "integer":
        return value - 1 if below else value + 1
    step = max(abs(value), 1.0) * 1e-9
    return value - step if below else value + step


def bound_cases(command: Callable[..., object]) -> list[tuple[str, str, bool]]:
    """(flag, value, accepted) at and past each numeric bound the command's --help states."""
    found = []
    for flag, (kind, text) in number_options(command).items():
        stated = RANGE.search(text)
        if stated is None:  # without_range names it
            continue
        opening, low, high, closing = stated.groups()
        cast = int if kind == "integer" else float
        for bound, edge, below in ((low, opening, True), (high, closing, False)):
            if bound.startswith("--"):  # a bound set by another flag (--clients)
                continue
            number = cast(float(bound))
            closed = edge in "[]"
            found.append((flag, str(number), closed))
            if closed:
                found.append((flag, str(cast(outside(number, kind, below))), False))
    return found
