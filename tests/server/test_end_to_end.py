"""Full runs: a real pfl-server process, real pfl-client processes, results equal to pfl-sim."""

from __future__ import annotations

import torch
from server_harness import (
    client_data_dirs,
    run_toml,
    server_global,
    simulated_global,
    spawn_client,
)


def assert_same_state(got, expected):
    assert sorted(got) == sorted(expected)
    for key in expected:
        assert torch.equal(got[key], expected[key]), key


def test_fedavg_over_http_equals_the_simulation(tmp_path, make_server):
    config = run_toml("fedavg", rounds=3)
    server = make_server(config, "--min-enrolled", "3")
    dirs = client_data_dirs(tmp_path / "clients", config)
    procs = [spawn_client(server, folder, server.token(cid)) for cid, folder in dirs.items()]
    status = server.wait_for(lambda s: s["status"] == "finished", timeout=240)
    assert [p.wait(60) for p in procs] == [0, 0, 0]
    assert [r["metrics"]["participants"] for r in status["history"]] == [2, 2, 2]
    assert all("train_loss" in r["metrics"] for r in status["history"])
    assert_same_state(server_global(server, status["global_hash"]),
                      simulated_global(config, tmp_path / "sim"))
