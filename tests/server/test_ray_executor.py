"""The Ray executor on a local 2-CPU cluster (started by the test, shut down after).

With one torch thread per worker and one in this process, Ray runs are bit-identical to the
sequential executor: results are folded in client-id order, whatever order workers finish in.
"""

import dataclasses

import pytest
import torch

from pflkit.sdk.data.federation import PartitionConfig
from pflkit.sdk.run_config import DataConfig, ExecutionConfig, SimConfig, TrainingConfig
from pflkit.sdk.tensorio import load_state
from pflkit.server.simulator import Simulation

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def config(algorithm="fedavg_ft", executor="sequential", rounds=3, workers=2):
    return SimConfig(
        seed=5, rounds=rounds, eval_interval=3, checkpoint_interval=3,
        data=DataConfig("digits", partition=PartitionConfig("dirichlet", 6, 0.5, min_size=20,
                                                            test_fraction=0.2)),
        model="twonn", algorithm=algorithm,
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
