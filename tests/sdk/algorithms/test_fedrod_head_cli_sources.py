"""pfl-fedrod-head names a source that exists but is neither a state file nor a run folder."""

import os

from typer.testing import CliRunner

from pflkit.sdk.fedrod_head_cli import app


def test_a_source_that_is_not_a_file_is_not_called_missing(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # exists, is neither a regular file nor a folder (as /dev/null)
    out = tmp_path / "head.safetensors"
    result = CliRunner().invoke(app, [str(fifo), "--class-counts", "1,1,1,1,1,1,1,1,1,1",
                                      "--out", str(out)])
    assert result.exit_code == 2
    assert "is not a state file nor a run directory" in result.output
    assert "does not exist" not in result.output
    assert not out.exists()
