"""pfl-server reads every number the operator gives in one spelling, as JSON writes numbers.

Before, a flag went through click's ``int()``/``float()`` and a ``PFL_SERVER_*`` variable
through pydantic's lax parsing: ``--port 1_0`` served on port 10, and ``+5``, `` 7 ``, ``010``
and ``8000.0`` were numbers too; in the TOML file ``workers = true`` was 1 worker and
``port = 8000.0`` port 8000. The HTTP API reads its integers strictly (server/api/params.py).
"""

from __future__ import annotations

import os
import subprocess

import pytest
from pydantic import ValidationError
from server_harness import BIN
from waiting import GUARD

from pflkit.server.settings import ServerSettings, explain

TOKEN = "t" * 20
SPELLING = "as JSON writes it (no '+', '_', spaces, leading 0)"


def refusal(monkeypatch, config=None, **variables: str) -> str:
    """The one-line error of loading the settings with these PFL_SERVER_* variables."""
    for name, value in variables.items():
        monkeypatch.setenv(f"PFL_SERVER_{name.upper()}", value)
    with pytest.raises(ValidationError) as err:
        ServerSettings.load(config, admin_token=TOKEN)
    return explain(err.value)


# every number setting, with its range as docs/server.md states it
INTEGERS = {"port": "[0, 65535]", "workers": "[1, 64]", "clients_per_round": "[1, 100000]",
            "min_enrolled": "[1, 100000]", "min_clients": "[1, 100000]",
            "max_upload_bytes": "[1024, 4294967296]", "max_num_samples": "[1, 1000000000]",
            "max_header_bytes": "[1024, 1048576]", "max_json_bytes": "[1024, 67108864]",
            "auth_failure_limit": "[1, 1000000]"}
DECIMALS = {"round_deadline": "(0, 604800]", "keep_alive_timeout": "(0, 3600]",
            "header_timeout": "(0, 3600]", "body_timeout": "(0, 3600]",
            "auth_failure_window": "(0, 86400]", "trim_fraction": "[0, 0.5)",
            "clip_norm": "(0, 1e+06]", "dp_clip_norm": "(0, 1e+06]",
            "dp_noise_multiplier": "[1e-06, 1000]", "dp_target_epsilon": "(0, 1000]",
            "dp_delta": "(0, 0.1]", "dp_max_epsilon": "(0, 1000]", "tick_seconds": "(0, 60]"}


@pytest.mark.parametrize("name,noun,stated_range", [
    *((name, "an integer", stated) for name, stated in INTEGERS.items()),
    *((name, "a number", stated) for name, stated in DECIMALS.items())])
def test_every_number_variable_refuses_a_loose_spelling_naming_its_range(
        monkeypatch, name, noun, stated_range):
    text = refusal(monkeypatch, **{name: "1_0"})
    assert f"PFL_SERVER_{name.upper()}" in text and "\n" not in text
    assert f"must be {noun} in {stated_range} {SPELLING}, got '1_0'" in text


def test_the_list_above_is_every_number_setting():
    numbers = {name for name, field in ServerSettings.model_fields.items()
               if "int" in str(field.annotation) or "float" in str(field.annotation)}
    assert numbers == {*INTEGERS, *DECIMALS}


@pytest.mark.parametrize("value", ["+5", " 7 ", "7 ", "010", "0x10", "8000.0", "1e3", "-0",
                                   "٣", "1" * 5000])
def test_an_integer_variable_is_ascii_digits_without_sign_or_padding(monkeypatch, value):
    text = refusal(monkeypatch, port=value)
    assert text.startswith("--port (or PFL_SERVER_PORT): must be an integer in [0, 65535] "
                           f"{SPELLING}, got '"), text
    assert len(text) < 300  # a 5000-digit value is cut, not echoed whole


@pytest.mark.parametrize("value", [".5", "5.", "+1.5", "1_0.5", " 1.5", "0x1p3", "1.5e",
                                   "Infinity"])
def test_a_decimal_variable_is_a_json_number(monkeypatch, value):
    text = refusal(monkeypatch, round_deadline=value)
    assert f"must be a number in (0, 604800] {SPELLING}" in text, text


@pytest.mark.parametrize("port", ["8080", "0"])
def test_plain_spellings_still_read(monkeypatch, port):
    monkeypatch.setenv("PFL_SERVER_PORT", port)
    monkeypatch.setenv("PFL_SERVER_ROUND_DEADLINE", "6e2")
    monkeypatch.setenv("PFL_SERVER_AGGREGATION", "trimmed_mean")
    monkeypatch.setenv("PFL_SERVER_TRIM_FRACTION", "0.25")
    monkeypatch.setenv("PFL_SERVER_MAX_UPLOAD_BYTES", "-1")  # a sign JSON has: the range's
    with pytest.raises(ValidationError, match="must be in"):
        ServerSettings.load(admin_token=TOKEN)
    monkeypatch.delenv("PFL_SERVER_MAX_UPLOAD_BYTES")
    settings = ServerSettings.load(admin_token=TOKEN)
    assert (settings.port, settings.round_deadline, settings.trim_fraction) == \
        (int(port), 600.0, 0.25)


@pytest.mark.parametrize("line,message", [
    ("workers = true", "--workers (or PFL_SERVER_WORKERS): must be an "
                       "integer in [1, 64]"),
    ("port = 8000.0", "--port (or PFL_SERVER_PORT): must be an integer in "
                      "[0, 65535]"),
    ("round_deadline = false", "must be a number in (0, 604800]"),
])
def test_the_config_file_gives_an_integer_as_an_integer(monkeypatch, tmp_path, line, message):
    config = tmp_path / "server.toml"
    config.write_text(line + "\n")
    assert message in refusal(monkeypatch, config)


def test_a_toml_integer_where_a_float_belongs_is_fine(tmp_path):
    config = tmp_path / "server.toml"
    config.write_text("round_deadline = 5\nport = 1_000\n")  # TOML's own digit separator
    settings = ServerSettings.load(config, admin_token=TOKEN)
    assert (settings.round_deadline, settings.port) == (5.0, 1000)


@pytest.mark.parametrize("flag,value,message", [
    ("--port", "1_0", "--port (or PFL_SERVER_PORT): must be an integer in [0, 65535]"),
    ("--min-enrolled", "+5", "--min-enrolled (or PFL_SERVER_MIN_ENROLLED): must be an integer "
                             "in [1, 100000]"),
    ("--round-deadline", " 60", "--round-deadline (or PFL_SERVER_ROUND_DEADLINE): must be a "
                                "number in (0, 604800]"),
])
def test_pfl_server_flags_are_read_as_strictly(tmp_path, flag, value, message):
    """click's int() and float() took these: the server served on port 10, deadline 60 s."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PFL_SERVER_")}
    env["PFL_SERVER_ADMIN_TOKEN"] = TOKEN
    # an address no machine listens on: a server that took the number stops there, not serving
    done = subprocess.run([str(BIN / "pfl-server"), "serve", "--data-dir",
                           str(tmp_path / "data"), "--host", "203.0.113.1", flag, value],
                          capture_output=True, text=True, env=env, timeout=GUARD)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"pfl-server: {message} {SPELLING}, got {value!r}")
    assert len(done.stderr.splitlines()) == 1 and not (tmp_path / "data").exists()


@pytest.mark.parametrize("name", ["host", "data_dir", "dataset_dir", "port", "database_url"])
def test_an_empty_variable_is_refused_not_read_as_every_address_or_the_cwd(monkeypatch, name):
    """PFL_SERVER_HOST= bound 0.0.0.0 and [::] (the default is 127.0.0.1), and an empty path
    was Path("") = ".": the data, or the datasets a run config may read, in the cwd."""
    text = refusal(monkeypatch, **{name: ""})
    assert text.endswith(f"PFL_SERVER_{name.upper()}): must not be empty (unset it for the "
                         "default)"), text


def test_pfl_server_refuses_an_empty_host_flag_before_listening(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PFL_SERVER_")}
    env["PFL_SERVER_ADMIN_TOKEN"] = TOKEN
    done = subprocess.run([str(BIN / "pfl-server"), "serve", "--data-dir", str(tmp_path / "data"),
                           "--host", "", "--tls-certfile", "none.pem", "--tls-keyfile",
                           "none.pem"],  # a server that took "" stops at these files
                          capture_output=True, text=True, env=env, timeout=GUARD)
    assert (done.returncode, done.stderr) == (2, "pfl-server: --host (or PFL_SERVER_HOST): must "
                                                 "not be empty (unset it for the default)\n")


def test_pfl_server_help_states_each_number_flags_range():
    from typer.testing import CliRunner

    from pflkit.server.cli import app

    shown = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "400"}).output
    flags = {**INTEGERS, **DECIMALS}
    for name in set(flags) - {"trim_fraction", "tick_seconds"}:  # no flags: the config file's
        line = next(x for x in shown.splitlines() if f"--{name.replace('_', '-')} " in x)
        assert f"in {flags[name]}" in line, line


@pytest.mark.parametrize("key", ["data_dir", "run_config", "dataset_dir", "tls_certfile"])
def test_a_nul_character_in_the_config_file_is_one_line_not_a_traceback(monkeypatch, tmp_path,
                                                                        key):
    """TOML may hold one (\\u0000): os calls raised "embedded null byte" past every handler."""
    config = tmp_path / "server.toml"
    config.write_text(f'{key} = "a\\u0000b"\n')
    assert refusal(monkeypatch, config).endswith(": must not contain a NUL character")
