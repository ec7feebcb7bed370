"""The Ray executor on a local 2-CPU cluster (started by the test, shut down after).

With one torch thread per worker and one in this process, Ray runs are bit-identical to the
sequential executor: results are folded in client-id order, whatever order workers finish in.
"""

import dataclasses
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from ctrl_c import restore_ctrl_c
from waiting import GUARD, wait_until

from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ExecutionConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.tensorio import load_state
from pflkit.server.simulator import Simulation

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def config(algorithm="fedavg_ft", executor="sequential", rounds=3, workers=2):
    workers = workers if executor == "ray" else None  # only the Ray executor has workers
    return SimConfig(
        seed=5, rounds=rounds, eval_interval=3, checkpoint_interval=3,
        data=DataConfig(dataset="digits", kind="dirichlet", num_clients=6, alpha=0.5, min_size=20,
                        test_fraction=0.2),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig(algorithm),
        training=TrainingConfig(clients_per_round=4, epochs=1, batch_size=16, lr=0.05),
        execution=ExecutionConfig(executor=executor, workers=workers),
    )


def assert_same_run(a, b):
    ga, gb = load_state(a / "global" / "latest.safetensors"), load_state(
        b / "global" / "latest.safetensors")
    assert ga.keys() == gb.keys()
    for k in ga:
        assert torch.equal(ga[k], gb[k]), k
    for path in sorted((a / "personalized").glob("*.safetensors")):
        other = load_state(b / "personalized" / path.name)
        for k, v in load_state(path).items():
            assert torch.equal(v, other[k]), (path.name, k)


def test_ray_is_bit_identical_to_sequential(tmp_path, cluster):
    seq = Simulation(config(), tmp_path / "seq", progress=False).run()
    par = Simulation(config(executor="ray"), tmp_path / "ray", progress=False).run()
    assert_same_run(tmp_path / "seq", tmp_path / "ray")
    assert par.final["clients"]["summary"] == seq.final["clients"]["summary"]


def test_clients_go_out_largest_first_and_are_folded_in_client_order(tmp_path, cluster):
    """One worker: the calls' order is the dispatch order; the round is still sequential's."""
    seq = Simulation(config(), tmp_path / "seq", progress=False)
    seq.run_round()
    sim = Simulation(config(executor="ray", workers=1), tmp_path / "ray", progress=False)
    actor, sent = sim.executor.workers[0], []

    def fit(key, payload, client_id, state, ctx):
        sent.append(client_id)
        return actor.fit.remote(key, payload, client_id, state, ctx)

    sim.executor.workers = [SimpleNamespace(fit=SimpleNamespace(remote=fit), pid=actor.pid)]
    sampled = sim.run_round()["clients"]
    rows = {cid: len(sim.federation.clients[cid].train) for cid in sampled}
    assert sorted(rows.values(), reverse=True) != list(rows.values())  # the order matters here
    assert sent == sorted(sampled, key=lambda cid: -rows[cid])
    for name, tensor in seq.coordinator.global_state.items():
        assert torch.equal(tensor, sim.coordinator.global_state[name]), name
    sim.executor.workers = [actor]
    sim.close()


def test_a_worker_killed_mid_round_gets_its_client_retried(tmp_path, cluster, monkeypatch):
    """The only worker dies and takes 12 s to come back (a loaded machine): its client waits.

    Calls to a restarting worker fail at once; sending the client again straight away burned
    every retry before the restart finished.
    """
    # SuPerFed: every client carries a private state through the workers and back
    Simulation(config("superfed_mm"), tmp_path / "seq", progress=False).run()
    monkeypatch.setenv("PFLKIT_CRASH_AT", "ray_worker_fit")
    monkeypatch.setenv("PFLKIT_CRASH_ONCE", str(tmp_path / "crashed-once"))
    monkeypatch.setenv("PFLKIT_SLOW_AT", "ray_worker_start:12")
    sim = Simulation(config("superfed_mm", "ray", workers=1), tmp_path / "ray", progress=False)
    sim.run_round()  # the worker dies at its first fit; its client goes to it again
    assert (tmp_path / "crashed-once").exists()
    monkeypatch.delenv("PFLKIT_CRASH_AT")
    monkeypatch.delenv("PFLKIT_SLOW_AT")
    sim.close()
    # resume (on Ray again) from the committed round: still the uninterrupted sequential run
    Simulation.resume(tmp_path / "ray", progress=False).run()
    assert_same_run(tmp_path / "seq", tmp_path / "ray")


def test_the_executor_leaves_a_cluster_it_did_not_start_running(tmp_path, cluster):
    sim = Simulation(dataclasses.replace(config(executor="ray"), rounds=1),
                     tmp_path / "r", progress=False)
    assert len(set(sim.executor.pids())) == 2
    sim.run()
    assert ray.is_initialized()


PFL_SIM = [str(Path(sys.executable).parent / "pfl-sim"), "--dataset", "digits", "--clients", "3",
           "--model", "twonn", "--rounds", "1", "--epochs", "1", "--executor", "ray", "--quiet"]


def test_an_unreachable_ray_address_is_one_line_before_anything_is_written(tmp_path):
    """ray.init retried 127.0.0.1:1 for 854 s (deaf to Ctrl-C) after --out was written."""
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = tmp_path / "run"
    done = subprocess.run([*PFL_SIM, "--out", str(out), "--ray-address", f"127.0.0.1:{port}"],
                          capture_output=True, text=True, timeout=GUARD, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip() == (
        f"error: execution.ray_address: no Ray cluster at 127.0.0.1:{port} (Connection refused "
        f"within execution.ray_connect_timeout = 10 s)"), done.stderr[-2000:]
    assert not out.exists()


def test_ctrl_c_stops_pfl_sim_while_ray_connects_at_once(tmp_path):
    """A port that accepts and never answers: Ray keeps reconnecting about once a second,
    and Python's KeyboardInterrupt waited ~40 s for Ray's C++ loop. After Ctrl-C the process
    must make no new connection (one may be under way as the signal lands)."""
    accepted: list[socket.socket] = []
    arrived = threading.Condition()
    listener = socket.create_server(("0.0.0.0", 0))  # Ray dials the node's address
    port = listener.getsockname()[1]

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed: the test is over
                return
            with arrived:
                accepted.append(conn)
                arrived.notify_all()

    threading.Thread(target=accept, daemon=True).start()
    out = tmp_path / "run"
    sim = subprocess.Popen([*PFL_SIM, "--out", str(out), "--ray-address", f"127.0.0.1:{port}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           preexec_fn=restore_ctrl_c)
    try:
        # the address check's connection, then Ray's own
        wait_until(lambda: len(accepted) >= 2 or sim.poll() is not None, "Ray connecting")
        assert sim.poll() is None, sim.stderr.read()[-2000:] if sim.stderr else ""
        with arrived:
            before = len(accepted)
        sim.send_signal(signal.SIGINT)
        sim.wait(GUARD)
        with arrived:
            after = len(accepted)
    finally:
        sim.kill()
        listener.close()
        for conn in accepted:
            conn.close()
    assert after - before <= 1, f"{after - before} connections after Ctrl-C"
    assert not out.exists()
    assert sim.returncode == -signal.SIGINT  # the default action: nothing was written to undo


def test_quiet_hides_rays_own_log_lines(tmp_path):
    """Ray logs through its own handlers: --quiet printed its start and token-auth notices."""
    done = subprocess.run([*PFL_SIM, "--out", str(tmp_path / "run")], capture_output=True,
                          text=True, timeout=GUARD, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Started a local Ray instance" not in done.stderr, done.stderr[-2000:]
    assert "Token authentication" not in done.stderr, done.stderr[-2000:]
