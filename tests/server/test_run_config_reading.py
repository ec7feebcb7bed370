"""How a real pfl-server reads its run_config file: each time, bounded, with its ``--set``.

Before: ``POST /v1/runs`` without a config read the file with ``read_text()`` (no size limit:
``/dev/zero`` grew without bound; a non-UTF-8 file was a 500 and a traceback in the log; a
missing one a 503 "retry later") and without the server's ``--set`` overrides, which only
the run created at start got.
"""

import json
import os
import subprocess

from server_harness import ADMIN, BIN, Server, run_toml
from waiting import GUARD

from pflkit.sdk.config_toml import MAX_CONFIG_BYTES


def restart_with(server: Server, *flags: str) -> None:
    server.stop()
    server.flags = [*server.flags, *flags]
    server.start()


def test_set_applies_to_every_run_made_from_the_file_as_it_reads_now(make_server):
    server = make_server(run_toml(rounds=3), "--set", "rounds=5")
    with server.admin() as http:
        assert http.get("/v1/runs/current").json()["rounds_total"] == 5
        http.post("/v1/runs/1/stop").raise_for_status()
        # edited on disk while the server runs: the next run reads the edit, --set still wins
        (server.root / "run.toml").write_text(run_toml(algorithm="fedper", rounds=9))
        second = http.post("/v1/runs", json={}).raise_for_status().json()
        assert (second["algorithm"], second["rounds_total"]) == ("fedper", 5)
        http.post(f"/v1/runs/{second['id']}/stop").raise_for_status()
    # restarted with another --set: the stopped run stays, the next run made from the file
    # gets the new override (a later --set on the same key wins, as in pfl-sim)
    restart_with(server, "--set", "rounds=7", "--log-level", "info")
    with server.admin() as http:
        assert http.get("/v1/runs/current").json()["id"] == second["id"]
        third = http.post("/v1/runs", json={}).raise_for_status().json()
        assert (third["id"], third["rounds_total"]) == (second["id"] + 1, 7)
    assert "run_config not started: the database holds run 2 (stopped)" in \
        (server.root / "server.log").read_text()


def test_a_run_config_file_beyond_reading_is_one_422_line_and_creates_nothing(make_server):
    server = make_server(run_toml(rounds=3))
    path = server.root / "run.toml"
    with server.admin() as http:
        http.post("/v1/runs/1/stop").raise_for_status()
        for write, says in [
            (lambda: path.write_bytes(b"rounds = 2\n# \xff\xfe\n"), "not UTF-8 text"),
            (lambda: path.write_bytes(b"#" * (MAX_CONFIG_BYTES + 1)),
             f"larger than {MAX_CONFIG_BYTES} bytes"),
            (lambda: path.symlink_to("/dev/zero"), f"larger than {MAX_CONFIG_BYTES} bytes"),
            (lambda: None, "cannot read (No such file or directory)"),
            (lambda: path.write_text("rounds = = 3\n"), "not valid TOML"),
        ]:
            path.unlink(missing_ok=True)
            write()
            reply = http.post("/v1/runs", json={})
            assert reply.status_code == 422, reply.text
            assert reply.json()["detail"].startswith(f"run config: {path}: {says}"), reply.json()
        assert http.get("/v1/runs/current").json()["id"] == 1
    log = (server.root / "server.log").read_text()
    assert "Traceback" not in log and " 500 " not in log


def test_a_create_while_a_run_is_live_is_refused_before_a_state_is_built(make_server):
    server = make_server(run_toml(rounds=3))
    blobs = server.data_dir / "blobs"
    before = sorted(p.name for p in blobs.rglob("*") if p.is_file())
    with server.admin() as http:
        other = run_toml(rounds=3).replace("seed = 0", "seed = 7")  # another initial state
        reply = http.post("/v1/runs", json={"config_toml": other})
        assert (reply.status_code, reply.json()["detail"]) == (
            409, "run 1 is active; stop it before creating another")
    assert sorted(p.name for p in blobs.rglob("*") if p.is_file()) == before


def test_run_overrides_in_the_environment_are_a_json_list_or_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PFL_SERVER_")}
    (tmp_path / "run.toml").write_text(run_toml())
    (tmp_path / "admin").write_text(ADMIN)
    (tmp_path / "admin").chmod(0o600)
    base = [str(BIN / "pfl-server"), "serve", "--data-dir", str(tmp_path / "data"),
            "--admin-token-file", str(tmp_path / "admin")]
    for extra, variable, message in [
        (["--run-config", str(tmp_path / "run.toml")], "rounds=2",
         '--set (or PFL_SERVER_RUN_OVERRIDES): must be a JSON list of KEY=VALUE strings '
         '(["rounds=5"])'),
        (["--run-config", str(tmp_path / "run.toml")], json.dumps(["rounds"]),
         "--set (or PFL_SERVER_RUN_OVERRIDES): --set expects KEY=VALUE (e.g. training.lr=0.05), "
         "got 'rounds'"),
        (["--run-config", str(tmp_path / "run.toml")], json.dumps(['training.lr="fast"']),
         "training.lr: input should be a valid number, got 'fast'"),
        ([], json.dumps(["rounds=2"]),
         "run_overrides (--set) change the run config: set run_config (--run-config) too"),
    ]:
        done = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=GUARD,
                              env={**env, "PFL_SERVER_RUN_OVERRIDES": variable})
        assert (done.returncode, done.stderr.strip()) == (2, f"pfl-server: {message}")
    assert not (tmp_path / "data").exists()
