"""pfl-export for a new client known only by its class distribution (FedRoD-hyper).

A distribution of the wrong length is the user's input, so the one-line error names the
options that give it and the run's class count, never the checkpoint the model is built from.
"""

from __future__ import annotations

import pytest
from test_bad_inputs import export, one_line_error


@pytest.mark.parametrize("args", [["--class-counts", "1,2,3"],
                                  ["--proportions", "0.5,0.5"],
                                  ["--choice", "class_distribution=1,1,1,1,1,1,1,1,1,1,1"]])
def test_a_distribution_of_the_wrong_length_blames_the_option(make_run, tmp_path, args):
    out = tmp_path / "out"
    code, output = export("--run", str(make_run("fedrod_hyper")), *args, "--format", "onnx",
                          "--out", str(out))
    one_line_error(code, output, "--class-counts")
    assert "10 entries, one per class of digits" in output and "safetensors" not in output
    assert not out.exists()
