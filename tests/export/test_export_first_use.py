"""pfl-export's first-use mistakes: exporting a run that has not finished, options left inert.

(And pfl-fedrod-head's errors, which alone began with a capital ``Error:``.)

Before: ``pfl-export --run RUN`` on a run still training (or stopped) exported its newest
round without a word, a model the finished run never evaluates; ``--golden-samples``,
``--max-int8-drop`` and ``--force-int8`` without their switch were silently ignored.
"""

from __future__ import annotations

import pytest
from test_bad_inputs import export, one_line_error
from typer.testing import CliRunner

from pflkit.sdk.fedrod_head_cli import app as head_app
from pflkit.server.simulator import Simulation


def test_a_run_that_has_not_finished_is_refused_unless_round_names_the_checkpoint(config_for,
                                                                                 tmp_path):
    run = tmp_path / "run"
    simulation = Simulation(config_for("fedavg_ft", rounds=3), run, progress=False)
    simulation.run_round()  # one of three rounds committed: as if pfl-sim were still running
    simulation.close()
    out = tmp_path / "out"
    one_line_error(*export("--run", str(run), "--client", "1", "--format", "onnx",
                           "--out", str(out)),
                   f"{run} has not finished (1 of 3 rounds done, no final.json): export it "
                   f"once pfl-sim ends (pfl-sim --resume {run} continues a stopped run), or "
                   f"give --round 1 to export that checkpoint as it is")
    assert not out.exists()
    code, output = export("--run", str(run), "--client", "1", "--round", "1", "--format",
                          "onnx", "--out", str(out))
    assert code == 0, output
    assert (out / "model.onnx").is_file()


@pytest.mark.parametrize(("args", "message"), [
    (["--golden-samples", "20"], "--golden-samples acts only with --golden: give --golden too"),
    (["--max-int8-drop", "5"], "--max-int8-drop acts only with --int8: give --int8 too"),
    (["--force-int8"], "--force-int8 acts only with --int8: give --int8 too"),
])
def test_an_option_whose_switch_is_off_is_refused_not_ignored(make_run, tmp_path, args,
                                                                message):
    out = tmp_path / "out"
    one_line_error(*export("--run", str(make_run("fedavg")), "--format", "onnx", *args,
                           "--out", str(out)), message)
    assert not out.exists()


def test_pfl_fedrod_head_says_error_in_lower_case_like_every_pfl_command(make_run, tmp_path):
    """It alone printed ``Error: ...``; scripts and users grep for ``error: `` from pfl-*."""
    result = CliRunner().invoke(head_app, [str(make_run("fedrod_hyper")),
                                           "--out", str(tmp_path / "head.safetensors")])
    assert result.exit_code == 2
    assert "error: give exactly one of --class-counts or --proportions" in \
        result.output.splitlines(), result.output
