import json

import pytest
import torch
import torch.nn.functional as F

from pflkit.sdk.run_config import (
    AggregationConfig,
    AlgorithmConfig,
    ConfigError,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.tensorio import load_state
from pflkit.server.simulator import Simulation


def config(algorithm="fedavg", rounds=4, **training):
    return SimConfig(
        seed=3, rounds=rounds, eval_interval=2, checkpoint_interval=2,
        data=DataConfig(dataset="digits", kind="dirichlet", num_clients=8, alpha=0.5, min_size=20,
                        test_fraction=0.2),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig(algorithm),
        training=TrainingConfig(**{"clients_per_round": 3, "epochs": 1, "batch_size": 32,
                                   "lr": 0.05, **training}),
    )


def final_weights(run_dir):
    return load_state(run_dir / "global" / "latest.safetensors")


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_same_seed_gives_bit_identical_weights(tmp_path):
    Simulation(config(), tmp_path / "a", progress=False).run()
    Simulation(config(), tmp_path / "b", progress=False).run()
    assert_same(final_weights(tmp_path / "a"), final_weights(tmp_path / "b"))
    other = config().replace(seed=4)
    Simulation(other, tmp_path / "c", progress=False).run()
    assert not torch.equal(final_weights(tmp_path / "a")["head.weight"],
                           final_weights(tmp_path / "c")["head.weight"])


def change_norm(after, before):
    return sum(float(((after[k] - before[k]) ** 2).sum()) for k in before) ** 0.5


@pytest.mark.parametrize("rule", ["mean", "median"])
def test_the_aggregation_section_clips_each_update_in_pfl_sim(tmp_path, rule):
    """Issue 23 item 2: pfl-sim uses the server's rules, chosen in the run config."""
    plain = Simulation(config(rounds=1), tmp_path / "plain", progress=False)
    clipped = Simulation(config(rounds=1).replace(aggregation=AggregationConfig(rule, 0.1, 0.05)),
                         tmp_path / "clipped", progress=False)
    start = plain.coordinator.global_state
    assert_same(start, clipped.coordinator.global_state)
    plain.run_round()
    clipped.run_round()
    free, bounded = plain.coordinator.global_state, clipped.coordinator.global_state
    assert change_norm(free, start) > 0.05  # the rule had something to do
    # each of the 3 updates moved at most 0.05: so does their mean; each coordinate of their
    # median is one of theirs, so its norm is at most sqrt(3) x 0.05
    assert change_norm(bounded, start) <= 0.05 * (1 + 1e-5) * (1 if rule == "mean" else 3**0.5)
    assert "clip_norm = 0.05" in (tmp_path / "clipped" / "config.toml").read_text()


@pytest.mark.parametrize("algorithm", ["fedavg", "local"])
def test_resume_equals_uninterrupted(tmp_path, algorithm):
    full = Simulation(config(algorithm), tmp_path / "full", progress=False).run()
    stopped = Simulation(config(algorithm), tmp_path / "resumed", progress=False)
    stopped.run_round()
    stopped.run_round()
    # A crash mid-round 3 leaves a client version for an uncommitted round behind.
    (tmp_path / "resumed" / "clients").mkdir(exist_ok=True)  # fedavg's clients save nothing
    (tmp_path / "resumed" / "clients" / "0.r2.safetensors").write_bytes(b"torn write")
    del stopped
    resumed = Simulation.resume(tmp_path / "resumed", progress=False).run()
    assert_same(full.global_state, resumed.global_state)
    assert resumed.final["clients"]["summary"] == full.final["clients"]["summary"]
    metrics = (tmp_path / "resumed" / "metrics.jsonl").read_text()
    rows = [json.loads(x) for x in metrics.splitlines()]
    assert [r["round"] for r in rows] == [0, 1, 2, 3]


def test_fedavg_with_one_client_and_full_batch_equals_centralized_sgd(tmp_path):
    cfg = SimConfig(
        seed=0, rounds=5, eval_interval=5, checkpoint_interval=5,
        data=DataConfig(dataset="digits", kind="iid", num_clients=1, test_fraction=0.0),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig("fedavg"),
        training=TrainingConfig(clients_per_round=1, epochs=1, batch_size=10_000, lr=0.5,
                                lr_decay=0.9, momentum=0.0, weight_decay=0.0),
    )
    sim = Simulation(cfg, tmp_path / "run", progress=False)
    init = {k: v.clone() for k, v in sim.coordinator.global_state.items()}
    data = sim.federation.clients[0].train
    result = sim.run()

    model = sim.algorithm.model_factory.build()
    model.load_state_dict(init)
    for r in range(5):
        model.zero_grad()
        F.cross_entropy(model(data.x), data.y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.5 * 0.9**r * p.grad
    for k, v in model.state_dict().items():
        torch.testing.assert_close(result.global_state[k], v, rtol=1e-5, atol=1e-6)


def test_run_directory_has_config_checkpoints_states_metrics_and_report(tmp_path):
    run = tmp_path / "run"
    Simulation(config("fedavg_ft"), run, progress=False).run()
    assert SimConfig.load(run / "config.toml") == config("fedavg_ft")
    assert {p.name for p in (run / "global").iterdir()} == {
        "latest.safetensors", "round_2.safetensors", "round_4.safetensors"}
    assert len(list((run / "personalized").iterdir())) == 8
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert "global_top1" in rows[1] and "global_top1" not in rows[0]
    final = json.loads((run / "final.json").read_text())
    assert 0.0 <= final["clients"]["summary"]["class_weighted_mean"] <= 1.0
    report = (run / "report.md").read_text()
    for png in ("accuracy.png", "loss.png", "clients.png", "partition.png"):
        assert (run / "plots" / png).stat().st_size > 1000
        assert png in report


def test_a_second_run_into_the_same_directory_is_refused(tmp_path):
    Simulation(config(rounds=1), tmp_path / "run", progress=False).run()
    with pytest.raises(FileExistsError, match="--resume"):
        Simulation(config(rounds=1), tmp_path / "run", progress=False)


def test_config_errors_name_the_key(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("rounds = 2\n[training]\nlearning_rate = 0.1\n")
    with pytest.raises(ConfigError, match=r"^training.learning_rate: unknown key "
                                          r"\(did you mean training.lr\?\)$"):
        SimConfig.load(path)
    path.write_text("rounds = [\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        SimConfig.load(path)
