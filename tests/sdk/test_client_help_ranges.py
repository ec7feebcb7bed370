"""``pfl-client --help`` states every number flag's range, and that range is the one checked.

As for pfl-sim and pfl-export (tests/help_ranges.py): the bounds are tried through the real
command line with a ``--data`` folder that holds no data, so a value that passes the flag's
check ends at that folder's error (exit 1), a refused one at the flag (exit 2), before any
request is sent.
"""

from __future__ import annotations

import pytest
from help_ranges import bound_cases, number_options, without_range
from typer.testing import CliRunner

from pflkit.sdk.client_cli import app, main

runner = CliRunner()


def test_every_number_flag_states_its_range_in_help():
    options = number_options(main)
    assert {"--rounds", "--threads", "--give-up-after", "--max-backoff", "--max-download-bytes",
            "--answer-deadline"} <= set(options)  # the introspection sees the flags
    assert not without_range(main), f"no range in --help of {without_range(main)}"


@pytest.mark.parametrize(("flag", "value", "accepted"), bound_cases(main))
def test_the_range_help_states_is_the_range_validation_checks(tmp_path, flag, value, accepted):
    result = runner.invoke(app, ["--server", "http://127.0.0.1:9", "--data", str(tmp_path),
                                 flag, value])
    assert result.exit_code == (1 if accepted else 2), f"{flag} {value}: {result.output}"
    reached_data = f"no data.safetensors in {tmp_path}" in result.output
    assert reached_data == accepted, f"{flag} {value}: {result.output}"
