"""``pfl-sim --help`` states every number flag's range, and the range it states is the one checked.

A first-time user reads the ranges in ``--help``, not in docs/simulator.md: each int or float
flag must say its range, and each stated bound must be exactly where the validation draws it.
The bounds are tried through the real command line on a run whose ``--out`` cannot be created,
so a value that passes validation ends at that ``--out`` error before any data is read.
"""

from __future__ import annotations

import pytest
from help_ranges import bound_cases, number_options, without_range
from typer.testing import CliRunner

from pflkit.server.simulator_cli import app, main

runner = CliRunner()


def test_every_number_flag_states_its_range_in_help():
    options = number_options(main)
    assert "--rounds" in options and "--lr" in options  # the introspection sees the flags
    assert not without_range(main), f"no range in --help of {without_range(main)}"


@pytest.mark.parametrize(("flag", "value", "accepted"), bound_cases(main))
def test_the_range_help_states_is_the_range_validation_checks(tmp_path, flag, value, accepted):
    (tmp_path / "file.txt").write_text("keep")
    out = tmp_path / "file.txt" / "run"  # validation first, then this --out fails
    result = runner.invoke(app, ["--out", str(out), "--dataset", "digits", "--model", "twonn",
                                 "--set", "training.lr_decay=1", flag, value, "--quiet"])
    assert result.exit_code == 2, result.output
    reached_out = "cannot create the run directory" in result.output
    assert reached_out == accepted, f"{flag} {value}: {result.output}"
