"""Full runs over HTTP: one real pfl-server process, three client processes per run.

Each algorithm's run ends bit-identical to pfl-sim with the same config: the server folds
updates in client-id order like the simulator, and every random choice is seeded by
(seed, round, client). Clients are forked from the test process (torch already imported)
to keep the suite fast; ``test_kill.py`` drives the ``pfl-client`` command itself.
"""

from __future__ import annotations

import multiprocessing
import shutil
from pathlib import Path

import httpx
import pytest
import torch
from server_harness import (
    Server,
    client_data_dirs,
    run_toml,
    server_global,
    simulated_global,
    spawn_client,
)
from waiting import GUARD

from pflkit.sdk.algorithms.base import ALGORITHMS
from pflkit.sdk.client import FederatedClient, RetryPolicy, load_client_data
from pflkit.sdk.tensorio import state_from_bytes

PARAMS = {
    "fedavg": "",
    "superfed_mm": "start_fraction = 0.5\n",
    "fedrod_hyper": "hidden = 8\n",
    "pflmoe": "epochs = 1\nbatch_size = 32\n",
}


def _client(url: str, state_dir: str, data_dir: str, token: str | None) -> None:
    torch.set_num_threads(1)
    client = FederatedClient(url, state_dir, load_client_data(data_dir), token=token,
                             retry=RetryPolicy(cap=1.0, max_elapsed=GUARD))
    client.run()
    client.personalized_model()(torch.zeros(1, 1, 28, 28))  # the device's model works


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """One server and three clients' data folders, shared by the runs of this module."""
    root = tmp_path_factory.mktemp("e2e")
    server = Server(root / "server", run_toml("fedavg", rounds=2), ["--min-enrolled", "3"])
    server.root.mkdir()
    server.start()
    dirs = client_data_dirs(root / "clients", server.config)
    yield server, dirs, {}
    server.stop()


def run_algorithm(server: Server, dirs, enrolled: dict, config: str) -> dict:
    with server.admin() as http:
        current = http.get("/v1/runs/current").raise_for_status().json()
        if current["status"] in ("active", "paused"):
            http.post(f"/v1/runs/{current['id']}/stop").raise_for_status()
        http.post("/v1/runs", json={"config_toml": config}).raise_for_status()
    ctx = multiprocessing.get_context("fork")
    procs = []
    for cid, folder in dirs.items():
        token = None if cid in enrolled else server.token(cid)
        enrolled[cid] = True
        procs.append(ctx.Process(target=_client, args=(server.url, str(folder / ".state"),
                                                       str(folder), token)))
        procs[-1].start()
    # a client that fails (e.g. an upload refused 422) ends the wait: the run would never finish
    status = server.wait_for(lambda s: s["status"] == "finished" or any(
        p.exitcode not in (None, 0) for p in procs))
    if status["status"] != "finished":
        for proc in procs:
            proc.terminate()
    for proc in procs:
        proc.join(GUARD)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    return status


@pytest.mark.parametrize("algorithm", list(PARAMS))
def test_run_over_http_equals_the_simulation(algorithm, fleet, tmp_path):
    if algorithm not in ALGORITHMS:
        pytest.skip(f"{algorithm} has not landed")
    server, dirs, enrolled = fleet
    config = run_toml(algorithm, rounds=2, params=PARAMS[algorithm])
    status = run_algorithm(server, dirs, enrolled, config)
    assert status["algorithm"] == algorithm
    assert [r["metrics"]["participants"] for r in status["history"]] == [2, 2]
    expected = simulated_global(config, tmp_path / "sim")
    got = server_global(server, status["global_hash"])
    assert sorted(got) == sorted(expected)
    for key in expected:
        assert torch.equal(got[key], expected[key]), key
    shutil.rmtree(tmp_path / "sim")
    if algorithm == "fedrod_hyper":
        check_zero_shot_head(server, status, got)


def check_zero_shot_head(server: Server, status: dict, global_state) -> None:
    """The algorithm query ``head`` equals zero_shot_head on the run's final global state."""
    from pflkit.sdk.algorithms.fedrod import zero_shot_head

    client_id, secret = server.enroll()
    try:
        url = f"{server.url}/v1/runs/{status['id']}/queries/head"
        headers = {"Authorization": f"Bearer {secret}"}
        counts = [5.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0]
        reply = httpx.post(url, json={"class_distribution": counts}, headers=headers)
        assert reply.status_code == 200, reply.text
        head = state_from_bytes(reply.content)
        expected = zero_shot_head(global_state, counts)
        assert sorted(head) == sorted(expected)
        # bitwise: the server process runs the test's torch thread count (tests/conftest.py)
        assert all(torch.equal(head[k], expected[k]) for k in expected)
        for bad in ({"class_distribution": [1.0, 2.0]}, {"counts": counts}, [1, 2], "x",
                    {"class_distribution": [1e308] * 10}):
            refused = httpx.post(url, json=bad, headers=headers)
            assert refused.status_code == 422 and refused.json()["detail"], bad
        deep = "[" * 200_000 + "]" * 200_000
        for value in ("1" + "0" * 400, "9" * 5000, "1e400", "NaN", "-Infinity", deep):
            refused = httpx.post(url, content='{"class_distribution": [' + value + "]}",
                                 headers={**headers, "Content-Type": "application/json"})
            assert refused.status_code in (400, 422) and refused.json()["detail"], value[:20]
        unknown = httpx.post(url.replace("/head", "/tail"), json={}, headers=headers)
        assert unknown.status_code == 404 and "head" in unknown.json()["detail"]
    finally:  # keep later runs' rosters to the three training clients, even after a failure
        with server.admin() as http:
            http.post(f"/v1/clients/{client_id}/revoke").raise_for_status()


def uvicorn_workers(pid: int) -> list[int]:
    """The pfl-server process's uvicorn workers (its python children but the resource tracker)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children
            if "multiprocessing" in Path(f"/proc/{c}/cmdline").read_text()
            and "resource_tracker" not in Path(f"/proc/{c}/cmdline").read_text()]


def maps_pytorch(pid: int) -> bool:
    return "libtorch" in Path(f"/proc/{pid}/maps").read_text()


def test_two_workers_serve_one_run_with_pfl_client_processes(database_url, make_server,
                                                            tmp_path):
    """uvicorn --workers 2 (SQLite, then PostgreSQL): same result as pfl-sim, and the HTTP
    workers never loaded PyTorch (the rounds are kept by the supervising process)."""
    config = run_toml("fedavg", rounds=2)
    database = ["--database-url", database_url] if database_url else []
    server = make_server(config, "--min-enrolled", "3", "--workers", "2", *database)
    dirs = client_data_dirs(tmp_path / "clients", config)
    procs = [spawn_client(server, folder, server.token(cid)) for cid, folder in dirs.items()]
    status = server.wait_for(lambda s: s["status"] == "finished")
    assert [p.wait(GUARD) for p in procs] == [0, 0, 0]
    assert [r["metrics"]["participants"] for r in status["history"]] == [2, 2]
    assert (server.data_dir / "server.db").exists() == (database_url is None)
    workers = uvicorn_workers(server.proc.pid)
    assert len(workers) == 2 and not any(maps_pytorch(pid) for pid in workers)
    expected = simulated_global(config, tmp_path / "sim")
    got = server_global(server, status["global_hash"])
    for key in expected:
        assert torch.equal(got[key], expected[key]), key


DP = "[aggregation]\ndp_clip_norm = 0.5\ndp_noise_multiplier = 1.0\n"


@pytest.mark.parametrize("dp", [
    "",
    # adaptive clipping: the clip norm is state of the run, stored with each close
    "dp_adaptive_quantile = 0.5\ndp_clipped_count_stddev = 1.0\ndp_clip_learning_rate = 0.5\n",
    # the devices clip (pfl-client's FederatedClient); the server refuses an unclipped update
    "dp_clip_on_device = true\n",
], ids=["fixed", "adaptive", "on_device"])
def test_a_dp_run_over_http_equals_the_simulation(fleet, tmp_path, dp):
    """Issue 24: DP-FedAvg is the same rule on both sides; given the run's ``dp_seed`` (to
    reproduce it), the server draws the simulation's sample and noise."""
    server, dirs, enrolled = fleet
    config = run_toml("fedavg", rounds=2) + \
        f"{DP}dp_seed = 4242\n" + dp
    status = run_algorithm(server, dirs, enrolled, config)
    expected = simulated_global(config, tmp_path / "sim")
    plain = simulated_global(run_toml("fedavg", rounds=2), tmp_path / "plain")
    got = server_global(server, status["global_hash"])
    assert all(torch.equal(got[key], expected[key]) for key in expected)
    assert not torch.equal(got["head.weight"], plain["head.weight"])


def test_a_dp_run_draws_its_sample_and_noise_from_a_server_secret(fleet, tmp_path):
    """Every task carries the run seed: noise drawn from it, any device could subtract (the
    simulation of the same config, which uses the run seed, is what a device could compute)."""
    server, dirs, enrolled = fleet
    config = run_toml("fedavg", rounds=2) + DP
    status = run_algorithm(server, dirs, enrolled, config)
    from_the_run_seed = simulated_global(config, tmp_path / "sim")
    got = server_global(server, status["global_hash"])
    assert not torch.equal(got["head.weight"], from_the_run_seed["head.weight"])
