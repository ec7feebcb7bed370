"""Epsilon where an operator and an app read it: `pfl-admin status` and the model card.

A DP run on a real pfl-server (three ``pfl-client`` processes) whose operator floor raises the
noise multiplier; `pfl-admin status` shows epsilon after the last round, the settings and the
budget left; pfl-export, given the served global state, writes the same epsilon into the card
with what it covers. Issue 24 item 2.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from server_harness import client_data_dirs, run_toml, spawn_client
from test_admin_cli import admin, ok
from waiting import GUARD

from pflkit.export import export_model
from pflkit.export.privacy_card import NOT_COVERED
from pflkit.export.source import load_device_source
from pflkit.sdk.algorithms.base import ClientState
from pflkit.sdk.algorithms.inference import Choice
from pflkit.sdk.privacy_accounting import epsilon
from pflkit.sdk.state_store import DeviceStateStore


def test_a_served_dp_runs_epsilon_is_in_the_status_and_the_model_card(make_server, tmp_path):
    config = run_toml("fedavg", rounds=2, num_clients=3, per_round=3) + \
        "[aggregation]\ndp_clip_norm = 0.05\ndp_noise_multiplier = 1.0\ndp_max_epsilon = 900.0\n"
    server = make_server(config, "--min-enrolled", "3", "--dp-clip-norm", "0.05",
                         "--dp-noise-multiplier", "1.5")
    conn = ["--url", server.url, "--token-file", str(server.root / "admin")]
    tokens = ok(admin(tmp_path, *conn, "tokens", "create", "--count", "3")).split()
    dirs = client_data_dirs(tmp_path / "devices", config)
    procs = [spawn_client(server, folder, token)
             for folder, token in zip(dirs.values(), tokens, strict=True)]
    assert [p.wait(GUARD) for p in procs] == [0, 0, 0]
    status = server.wait_for(lambda s: s["status"] == "finished")

    spent = epsilon(1.5, 3, 3, 2, 1e-5)  # the server's noise, not the run's 1.0
    shown = json.loads(ok(admin(tmp_path, *conn, "status", "--json")))["privacy"]
    assert (shown["epsilon"], shown["noise_multiplier"], shown["clip_norm"]) == (spent, 1.5, 0.05)
    assert (shown["delta"], shown["rounds"], shown["max_epsilon"]) == (1e-5, 2, 900.0)
    assert shown["epsilon_left"] == 900.0 - spent
    text = ok(admin(tmp_path, *conn, "status", "--once"))
    assert (f"privacy: epsilon {spent:.3f} at delta 1e-05 after 2 rounds; noise multiplier "
            f"1.5, clip norm 0.05; budget 900, {900 - spent:.3f} left") in text

    # the app's export: its (empty) state, the served global state, the run's TOML
    digest = status["global_hash"]
    global_file = tmp_path / "global.safetensors"
    shutil.copyfile(server.data_dir / "blobs" / digest[:2] / digest, global_file)
    (tmp_path / "run.toml").write_text(config)
    DeviceStateStore(tmp_path / "app").save(ClientState())
    source = load_device_source(tmp_path / "app", global_file, tmp_path / "run.toml")
    card = export_model(source, Choice(), tmp_path / "out",
                        ("onnx",)).card
    privacy = card["privacy"]
    assert (privacy["epsilon"], privacy["noise_multiplier"], privacy["rounds"]) == (spent, 1.5, 2)
    assert privacy["sampling"] == {"kind": "fixed-size without replacement",
                                   "clients_per_round": 3, "population": 3}
    assert privacy["shared_tensors"] == sorted(source.global_state)
    assert privacy["not_covered"] == NOT_COVERED and "NO differential-privacy" in NOT_COVERED
    assert json.loads(Path(tmp_path / "out" / "model_card.json").read_text())["privacy"] == privacy
