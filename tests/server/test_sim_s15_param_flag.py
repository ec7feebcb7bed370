"""``--param`` errors are one short line naming ``--param``, as ``--set``'s are.

``--param`` without ``=`` echoed the whole argument (5000 characters: a pasted file), and a
value beyond TOML's limits was blamed on ``--set``, a flag the user had not given.
"""

from __future__ import annotations

from typer.testing import CliRunner

from pflkit.server.simulator_cli import app

runner = CliRunner()
RUN = ["--dataset", "digits", "--clients", "3", "--model", "twonn", "--algorithm", "fedprox",
       "--rounds", "1", "--quiet"]


def test_a_param_without_a_value_is_shown_cut_to_one_line(tmp_path):
    result = runner.invoke(app, ["--out", str(tmp_path / "run"), *RUN, "--param", "m" * 5000])
    assert result.exit_code == 2
    assert result.output.strip() == ("error: --param expects KEY=VALUE (e.g. mu=0.01), got '"
                                      + "m" * 76 + "...")
    assert not (tmp_path / "run").exists()


def test_a_param_value_nested_too_deep_names_param(tmp_path):
    result = runner.invoke(app, ["--out", str(tmp_path / "run"), *RUN,
                                 "--param", "mu=" + "[" * 40 + "]" * 40])
    assert result.exit_code == 2
    assert result.output.strip() == ("error: --param 'mu': tables and arrays nested more than "
                                      "32 deep")
