"""``pfl-sim --help`` states every number flag's range, and the range it states is the one checked.

A first-time user reads the ranges in ``--help``, not in docs/simulator.md: each int or float
flag must say its range, and each stated bound must be exactly where the validation draws it.
The bounds are tried through the real command line on a run whose ``--out`` cannot be created,
so a value that passes validation ends at that ``--out`` error before any data is read.
"""

from __future__ import annotations

import re
import typing

import pytest
from typer.models import OptionInfo
from typer.testing import CliRunner

from pflkit.server.simulator_cli import app, main

runner = CliRunner()
RANGE = re.compile(r"([\[(])([-+.\w]+), ([-+.\w]+)([\])])")  # [a, b], (a, b], [a, b)


def number_options() -> dict[str, tuple[str, str]]:
    """``--flag`` -> ("integer" or "float", its help) for every number option of pfl-sim."""
    found = {}
    for name, hint in typing.get_type_hints(main, include_extras=True).items():
        if typing.get_origin(hint) is not typing.Annotated:
            continue
        kind, info = typing.get_args(hint)[0], typing.get_args(hint)[1]
        numbers = [t for t in typing.get_args(kind) if t in (int, float)]
        if isinstance(info, OptionInfo) and numbers:
            flag = info.param_decls[0] if info.param_decls else f"--{name.replace('_', '-')}"
            found[flag] = ("integer" if numbers[0] is int else "float", info.help or "")
    return found


def test_every_number_flag_states_its_range_in_help():
    options = number_options()
    assert "--rounds" in options and "--lr" in options  # the introspection sees the flags
    missing = [flag for flag, (_, text) in options.items() if not RANGE.search(text)]
    assert not missing, f"no range in --help of {missing}"


def outside(value: float, kind: str, below: bool) -> float:
    """The nearest value past a bound: the next integer, or a relative nudge of a float."""
    if kind == "integer":
        return value - 1 if below else value + 1
    step = max(abs(value), 1.0) * 1e-9
    return value - step if below else value + step


def cases() -> list[tuple[str, str, bool]]:
    """(flag, value, accepted) at and past each numeric bound --help states."""
    found = []
    for flag, (kind, text) in number_options().items():
        stated = RANGE.search(text)
        if stated is None:  # test_every_number_flag_states_its_range_in_help names it
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


@pytest.mark.parametrize(("flag", "value", "accepted"), cases())
def test_the_range_help_states_is_the_range_validation_checks(tmp_path, flag, value, accepted):
    (tmp_path / "file.txt").write_text("keep")
    out = tmp_path / "file.txt" / "run"  # validation first, then this --out fails
    result = runner.invoke(app, ["--out", str(out), "--dataset", "digits", "--model", "twonn",
                                 "--set", "training.lr_decay=1", flag, value, "--quiet"])
    assert result.exit_code == 2, result.output
    reached_out = "cannot create the run directory" in result.output
    assert reached_out == accepted, f"{flag} {value}: {result.output}"
