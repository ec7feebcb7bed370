"""DP-FedAvg in pfl-sim: seeded, accounted round by round, and stopped at its budget."""

import json

import pytest
import torch

from pflkit.sdk.privacy_accounting import PrivacyBudgetExceeded, epsilon
from pflkit.sdk.run_config import (
    AggregationConfig,
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.tensorio import load_state
from pflkit.server.simulator import Simulation

DP = AggregationConfig(dp_clip_norm=0.5, dp_noise_multiplier=1.5)


def config(aggregation=DP, rounds=3):
    return SimConfig(
        seed=5, rounds=rounds, eval_interval=3, checkpoint_interval=1,
        data=DataConfig(dataset="digits", kind="dirichlet", num_clients=8, alpha=0.5, min_size=20,
                        test_fraction=0.2),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig("fedavg"),
        training=TrainingConfig(clients_per_round=3, epochs=1, batch_size=32, lr=0.05),
        aggregation=aggregation,
    )


def run(tmp_path, name, cfg):
    Simulation(cfg, tmp_path / name, progress=False).run()
    rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text()
            .splitlines()]
    return load_state(tmp_path / name / "global" / "latest.safetensors"), rows


def test_a_seeded_dp_run_is_reproducible_differs_from_plain_and_records_epsilon(tmp_path):
    a, rows = run(tmp_path, "a", config())
    b, _ = run(tmp_path, "b", config())
    plain, plain_rows = run(tmp_path, "plain", config(AggregationConfig()))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["head.weight"], plain["head.weight"])
    population = 8 - config().data.num_new_clients
    spent = [row["dp_epsilon"] for row in rows]
    assert spent == [epsilon(1.5, 3, population, r, 1e-5) for r in (1, 2, 3)]
    assert spent == sorted(spent) and spent[0] < spent[-1]
    assert {row["dp_delta"] for row in rows} == {1e-5}
    assert "dp_epsilon" not in plain_rows[-1]
    assert "epsilon" in (tmp_path / "a" / "report.md").read_text()


def test_the_run_stops_before_the_round_that_would_pass_its_budget(tmp_path):
    population = 8 - config().data.num_new_clients
    after = [epsilon(1.5, 3, population, r, 1e-5) for r in (2, 3)]
    budget = AggregationConfig(dp_clip_norm=0.5, dp_noise_multiplier=1.5,
                               dp_max_epsilon=round(sum(after) / 2, 3))
    with pytest.raises(PrivacyBudgetExceeded, match="round 2 would spend epsilon"):
        Simulation(config(budget), tmp_path / "run", progress=False).run()
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["round"] for line in rows] == [0, 1]  # round 2 never ran


ADAPTIVE = AggregationConfig(dp_clip_norm=0.5, dp_noise_multiplier=1.0, dp_adaptive_quantile=0.5,
                             dp_clipped_count_stddev=1.0, dp_clip_learning_rate=0.5)


def test_adaptive_clipping_records_its_clip_norm_history(tmp_path):
    _, rows = run(tmp_path, "a", config(ADAPTIVE))
    norms = [row["dp_clip_norm"] for row in rows]
    assert norms[0] == 0.5 and len(set(norms)) == 3  # it moves every round
    assert [row["dp_epsilon"] for row in rows] == \
        [epsilon(1.0, 3, 8 - config().data.num_new_clients, r, 1e-5) for r in (1, 2, 3)]
    report = (tmp_path / "a" / "report.md").read_text()
    assert f"Clip norm (adaptive): 0.5 in round 0, {norms[-1]:.4g} in round 2" in report


def test_a_resumed_adaptive_run_equals_the_uninterrupted_one(tmp_path):
    """The clip norm is state of the run: the checkpoint carries it to the resumed run."""
    whole, whole_rows = run(tmp_path, "whole", config(ADAPTIVE))
    stopped = Simulation(config(ADAPTIVE), tmp_path / "part", progress=False)
    for _ in range(2):
        stopped.run_round()
    stopped.close()
    Simulation.resume(tmp_path / "part", progress=False).run()
    resumed = load_state(tmp_path / "part" / "global" / "latest.safetensors")
    rows = [json.loads(line) for line in (tmp_path / "part" / "metrics.jsonl").read_text()
            .splitlines()]
    assert [r["dp_clip_norm"] for r in rows] == [r["dp_clip_norm"] for r in whole_rows]
    assert all(torch.equal(resumed[k], whole[k]) for k in whole)
