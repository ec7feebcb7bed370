"""The batched executor: 20 rounds land within 0.3 points of the sequential run; fallback."""

import logging

import pytest
import torch

from pflkit.sdk.data.federation import PartitionConfig
from pflkit.sdk.run_config import DataConfig, ExecutionConfig, SimConfig, TrainingConfig
from pflkit.server.simulator import Simulation


def config(algorithm, executor, rounds=20, params=None):
    return SimConfig(
        seed=2, rounds=rounds, eval_interval=rounds, checkpoint_interval=rounds,
        data=DataConfig("synthetic", partition=PartitionConfig("dirichlet", 8, 0.5, min_size=40,
                                                               test_fraction=0.2)),
        model="twonn", algorithm=algorithm, params=params or {},
        training=TrainingConfig(clients_per_round=4, epochs=1, batch_size=16, lr=0.05,
                                momentum=0.9, weight_decay=1e-4),
        execution=ExecutionConfig(executor=executor),
    )


def run(tmp_path, algorithm, executor, **kwargs):
    cfg = config(algorithm, executor, **kwargs)
    return Simulation(cfg, tmp_path / executor, progress=False).run()


@pytest.mark.parametrize(("algorithm", "params"), [
    ("superfed_mm", {"sweep": False}),
    ("fedrod_linear", {}),
])
def test_twenty_batched_rounds_end_within_0_3_points_of_sequential(tmp_path, algorithm, params):
    sequential = run(tmp_path, algorithm, "sequential", params=params).final
    batched = run(tmp_path, algorithm, "batched", params=params).final
    for final in (sequential, batched):
        assert final["rounds"] == 20
    own = [f["clients"]["summary"]["own_top1_mean"] for f in (sequential, batched)]
    generic = [f["global_model"]["top1"] for f in (sequential, batched)]
    assert own[0] > 0.5  # the runs learned something: the comparison means something
    assert abs(own[1] - own[0]) <= 0.003
    assert abs(generic[1] - generic[0]) <= 0.003


def test_a_method_that_cannot_batch_logs_why_and_runs_as_sequential(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="pflkit.server.batched_executor"):
        batched = run(tmp_path, "local", "batched", rounds=2)
    assert "local has no batched trainer; training clients one by one" in caplog.text
    sequential = run(tmp_path, "local", "sequential", rounds=2)
    assert batched.final == sequential.final
    assert all(torch.equal(batched.global_state[k], sequential.global_state[k])
               for k in sequential.global_state)
