"""A bad run config or server setting is refused whole, in one line naming the key (#15 item 11).

Before: ``POST /v1/runs`` answered 500 for ``epochs = "two"`` and 201 for ``rounds = "2"``,
``lr = "fast"`` (the broken run then stayed active); pfl-sim printed a 74-line traceback and
left a half-written run directory; a missing admin token printed pydantic's class names.
"""

import os
import subprocess

import pytest
from server_harness import BIN, run_toml
from typer.testing import CliRunner
from waiting import GUARD

from pflkit.server.simulator_cli import app


@pytest.mark.parametrize("line,bad,key", [
    ("epochs = 1", 'epochs = "two"', "training.epochs"),
    ("rounds = 3", 'rounds = "2"', "rounds"),
    ("lr = 0.05", 'lr = "fast"', "training.lr"),
])
def test_pfl_sim_refuses_a_bad_value_before_writing_anything(tmp_path, line, bad, key):
    config = tmp_path / "run.toml"
    config.write_text(run_toml().replace(line, bad))
    result = CliRunner().invoke(app, ["--config", str(config), "--out", str(tmp_path / "run"),
                                      "--quiet"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {key}: input should be"), lines
    assert not (tmp_path / "run").exists()


def test_pfl_sim_set_overrides_reach_the_run_directory(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text(run_toml(rounds=1))
    result = CliRunner().invoke(app, [
        "--config", str(config), "--out", str(tmp_path / "run"), "--quiet",
        "--set", "training.lr=0.125", "--set", "data.num_clients=4", "--set", "eval_interval=1"])
    assert result.exit_code == 0, result.output
    written = (tmp_path / "run" / "config.toml").read_text()
    assert "lr = 0.125" in written and "num_clients = 4" in written
    bad = CliRunner().invoke(app, ["--config", str(config), "--out", str(tmp_path / "r2"),
                                   "--set", 'rounds="2"', "--quiet"])
    assert bad.exit_code == 2 and "rounds: input should be a valid integer" in bad.output


def test_the_api_answers_422_naming_the_key_and_creates_no_run(make_server):
    server = make_server(run_toml(rounds=3), "--set", "rounds=1")  # --set reaches the run
    with server.admin() as http:
        current = http.get("/v1/runs/current").json()
        first = current["id"]
        assert current["rounds_total"] == 1
        http.post(f"/v1/runs/{first}/stop").raise_for_status()
        for bad, key in [(run_toml().replace("epochs = 1", 'epochs = "two"'), "training.epochs"),
                         (run_toml().replace("rounds = 3", 'rounds = "2"')
                          .replace("lr = 0.05", 'lr = "fast"'), "rounds"),
                         (run_toml(model="nope.nets:Net"), "model.name")]:
            reply = http.post("/v1/runs", json={"config_toml": bad})
            assert reply.status_code == 422, reply.text
            assert reply.json()["detail"].startswith(f"run config: {key}:"), reply.json()
        assert http.get("/v1/runs/current").json()["id"] == first


def test_pfl_server_names_the_flag_or_variable_and_the_run_config_key(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PFL_SERVER_")}
    (tmp_path / "run.toml").write_text(run_toml().replace("rounds = 3", 'rounds = "2"'))
    base = [str(BIN / "pfl-server"), "serve", "--data-dir", str(tmp_path / "data"),
            "--run-config", str(tmp_path / "run.toml")]
    no_token = subprocess.run(base, capture_output=True, text=True, env=env, timeout=GUARD)
    assert no_token.returncode == 2
    assert no_token.stderr.strip() == ("pfl-server: --admin-token-file (or "
                                       "PFL_SERVER_ADMIN_TOKEN): missing")
    (tmp_path / "admin").write_text("x" * 32)
    (tmp_path / "admin").chmod(0o600)  # a token file others may read gets a warning
    bad_run = subprocess.run([*base, "--admin-token-file", str(tmp_path / "admin")],
                             capture_output=True, text=True, env=env, timeout=GUARD)
    assert bad_run.returncode == 2
    assert bad_run.stderr.strip() == ("pfl-server: rounds: input should be a valid integer, "
                                      "got '2'")
    assert not (tmp_path / "data").exists()  # validated before anything was created
    overridden = subprocess.run([*base, "--admin-token-file", str(tmp_path / "admin"), "--set",
                                 "rounds=2", "--set", 'training.lr="fast"'],
                                capture_output=True, text=True, env=env, timeout=GUARD)
    assert overridden.returncode == 2
    assert overridden.stderr.strip() == ("pfl-server: training.lr: input should be a valid "
                                         "number, got 'fast'")
    fixed = subprocess.run([*base, "--admin-token-file", str(tmp_path / "admin"),
                            "--round-deadline", "-1"], capture_output=True, text=True, env=env,
                           timeout=GUARD)
    assert fixed.returncode == 2
    assert fixed.stderr.strip() == ("pfl-server: --round-deadline (or PFL_SERVER_ROUND_DEADLINE): "
                                    "must be in (0, 604800], got -1.0")


@pytest.mark.parametrize("args,message", [
    # issue #21 item 2: tracebacks of 81-111 lines and exit 1, or a server that started
    (["--set", "training.lr_decay=1e300"], "training.lr_decay: must be in (0, 1], got 1e+300"),
    (["--set", "training.lr_decay=1.5", "--set", "rounds=2000"],
     "training.lr_decay: must be in (0, 1], got 1.5"),
    (["--set", "data.resize=4611686018427387904"],
     "data.resize: must be in [1, 512], got 4611686018427387904"),
    (["--set", "seed=18446744073709551616"],
     "seed: must be in [0, 4294967295], got 18446744073709551616"),
    (["--round-deadline", "inf"],
     "--round-deadline (or PFL_SERVER_ROUND_DEADLINE): must be in (0, 604800], got inf"),
    (["--keep-alive-timeout", "inf"],
     "--keep-alive-timeout (or PFL_SERVER_KEEP_ALIVE_TIMEOUT): must be in (0, 3600], got inf"),
])
def test_pfl_server_refuses_an_out_of_range_number_in_one_line(tmp_path, args, message):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PFL_SERVER_")}
    (tmp_path / "run.toml").write_text(run_toml())
    (tmp_path / "admin").write_text("x" * 32)
    (tmp_path / "admin").chmod(0o600)  # a token file others may read gets a warning
    done = subprocess.run([str(BIN / "pfl-server"), "serve", "--data-dir", str(tmp_path / "data"),
                           "--run-config", str(tmp_path / "run.toml"), "--admin-token-file",
                           str(tmp_path / "admin"), *args],
                          capture_output=True, text=True, env=env, timeout=GUARD)
    assert (done.returncode, done.stderr.strip()) == (2, f"pfl-server: {message}")
    assert not (tmp_path / "data").exists()


def test_the_api_refuses_out_of_range_numbers_and_an_empty_config_with_422(make_server):
    """Issue #21 item 2: these answered 500 (or started a 100-round run of the defaults)."""
    server = make_server(run_toml(rounds=3))
    with server.admin() as http:
        first = http.get("/v1/runs/current").json()["id"]
        http.post(f"/v1/runs/{first}/stop").raise_for_status()
        for bad, message in [
            (run_toml() + "lr_decay = 1e300\n", "training.lr_decay: must be in (0, 1]"),
            (run_toml(rounds=2000) + "lr_decay = 1.5\n", "training.lr_decay: must be in (0, 1]"),
            (run_toml(resize=1000000), "data.resize: must be in [1, 512], got 1000000"),
            (run_toml(resize=4611686018427387904), "data.resize: must be in [1, 512]"),
            (run_toml().replace("seed = 0", f"seed = {2**64}"), "seed: must be in [0, 4294967295]"),
            ("", "config_toml: has no keys"),
            ("# nothing\n", "config_toml: has no keys"),
        ]:
            reply = http.post("/v1/runs", json={"config_toml": bad})
            assert reply.status_code == 422, reply.text
            detail = reply.json()["detail"]
            assert detail.startswith(f"run config: {message}") and "\n" not in detail, detail
        assert http.get("/v1/runs/current").json()["id"] == first


@pytest.mark.parametrize("text,message", [
    ("port = [unclosed\n", "not valid TOML (Invalid value (at line 1, column 9))"),
    (b"port = '\xff'\n", "not UTF-8 text"),
])
def test_pfl_server_refuses_a_broken_config_file_in_one_line_naming_it_once(tmp_path, text,
                                                                            message):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PFL_SERVER_")}
    config = tmp_path / "server.toml"
    config.write_bytes(text if isinstance(text, bytes) else text.encode())
    done = subprocess.run([str(BIN / "pfl-server"), "serve", "--config", str(config),
                           "--data-dir", str(tmp_path / "data")],
                          capture_output=True, text=True, env=env, timeout=GUARD)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == f"pfl-server: {config}: {message}"
    assert not (tmp_path / "data").exists()


def test_pfl_sim_names_a_config_file_that_is_not_utf8_text(tmp_path):
    config = tmp_path / "run.toml"
    config.write_bytes(b"rounds = '\xff'\n")
    result = CliRunner().invoke(app, ["--config", str(config), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {config}: not UTF-8 text"


def test_the_admin_token_file_is_read_in_one_line_and_a_readable_one_is_warned_of(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PFL_SERVER_")}
    (tmp_path / "run.toml").write_text(run_toml().replace("rounds = 3", 'rounds = "2"'))
    base = [str(BIN / "pfl-server"), "serve", "--data-dir", str(tmp_path / "data"),
            "--run-config", str(tmp_path / "run.toml"), "--admin-token-file"]
    missing = subprocess.run([*base, str(tmp_path / "nope")], capture_output=True, text=True,
                             env=env, timeout=GUARD)
    assert missing.returncode == 2  # was a FileNotFoundError traceback, exit 1
    assert missing.stderr.splitlines() == [
        f"pfl-server: cannot read the admin token file {tmp_path / 'nope'}: No such file or "
        "directory"]
    token = tmp_path / "admin"
    token.write_text("x" * 32)
    token.chmod(0o644)  # what `openssl rand -hex 32 > admin.token` leaves
    exposed = subprocess.run([*base, str(token)], capture_output=True, text=True, env=env,
                             timeout=GUARD)
    assert exposed.returncode == 2  # the bad run config, reported after the warning
    assert exposed.stderr.splitlines() == [
        f"pfl-server: warning: {token} holds the admin token and other users may read it "
        f"(mode 0644): chmod 600 {token}",
        "pfl-server: rounds: input should be a valid integer, got '2'"]
    assert "x" * 32 not in exposed.stderr


@pytest.mark.parametrize("variable,value,message", [
    # a setting without a flag was reported under a flag pfl-server does not have
    ("PFL_SERVER_TICK_SECONDS", "nan",
     "tick_seconds (the --config file's, or PFL_SERVER_TICK_SECONDS): must be in (0, 60], "
     "got nan"),
    # a misspelt variable was ignored: the server started on the default deadline
    ("PFL_SERVER_ROUND_DEADLIN", "5",
     "unknown setting variable PFL_SERVER_ROUND_DEADLIN; did you mean "
     "PFL_SERVER_ROUND_DEADLINE?"),
    # a token no client can send in a header: the server started, its admin API unusable
    ("PFL_SERVER_ADMIN_TOKEN", "pässwörd-1234567890",
     "--admin-token-file (or PFL_SERVER_ADMIN_TOKEN): must be printable ASCII without spaces: "
     "it travels in an HTTP header (not shown here)"),
    # a short token was quoted whole in the error (pydantic's min_length shows its input)
    ("PFL_SERVER_ADMIN_TOKEN", "short-token",
     "--admin-token-file (or PFL_SERVER_ADMIN_TOKEN): must be at least 16 characters, got 11 "
     "(not shown here)"),
])
def test_pfl_server_settings_from_the_environment_are_checked_in_one_line(
        tmp_path, variable, value, message):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PFL_SERVER_")}
    env.setdefault("PFL_SERVER_ADMIN_TOKEN", "x" * 32)
    env[variable] = value
    (tmp_path / "run.toml").write_text(run_toml())
    done = subprocess.run([str(BIN / "pfl-server"), "serve", "--data-dir", str(tmp_path / "data"),
                           "--run-config", str(tmp_path / "run.toml")],
                          capture_output=True, text=True, env=env, timeout=GUARD)
    assert (done.returncode, done.stderr.strip()) == (2, f"pfl-server: {message}")
    assert not (tmp_path / "data").exists()
