"""New clients: the generic model scored like their zero-shot heads (docs/fedrod.md)."""

from __future__ import annotations

import json

import pytest
import torch

from pflkit.sdk.algorithms import ClientState
from pflkit.sdk.algorithms.inference import Choice
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.metrics import predict
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.tensorio import load_state
from pflkit.server.simulator import Simulation

NEW = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A seconds-long FedRoD-hyper run on digits: 4 training and 3 new clients."""
    config = SimConfig(
        seed=0, rounds=2, eval_interval=2, checkpoint_interval=1,
        data=DataConfig(dataset="digits", kind="dirichlet", num_clients=4 + NEW, alpha=1.0,
                        test_fraction=0.25, num_new_clients=NEW),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig("fedrod_hyper", {}),
        training=TrainingConfig(clients_per_round=4, epochs=1, batch_size=32, lr=0.05))
    sim = Simulation(config, tmp_path_factory.mktemp("vs-generic") / "run", progress=False)
    return sim, sim.run()


def correct_share(model: torch.nn.Module, test: LabeledTensors, weights: torch.Tensor) -> float:
    """FedRoD's sum_i P(y_i) 1(y_i = yhat_i) / sum_i P(y_i), its sum over rows taken per class."""
    pred, y = predict(model, test).argmax(1), test.y
    p = weights.double() / weights.double().sum()
    right = sum(float(p[c]) * int(((pred == c) & (y == c)).sum()) for c in range(len(p)))
    return right / sum(float(p[c]) * int((y == c).sum()) for c in range(len(p)))


def test_generic_is_scored_on_each_new_clients_weights_and_rows(run):
    sim, result = run
    new = result.final["new_clients"]
    state = load_state(result.run_dir / "global" / "latest.safetensors")
    inference = sim.algorithm.inference
    test, num_classes = sim.federation.test, sim.federation.spec.num_classes
    generic = new["generic"]["per_client"]
    assert [g["client_id"] for g in generic] == list(sim.federation.new_clients)
    for row, (cid, client) in zip(generic, sim.federation.new_clients.items(), strict=True):
        counts = client.class_counts(num_classes)
        expected = correct_share(inference.global_model(state), test, counts)
        assert row["class_weighted"] == pytest.approx(expected, abs=1e-9)
        own = predict(inference.global_model(state), client.test).argmax(1)
        assert row["own_top1"] == pytest.approx(float((own == client.test.y).float().mean()))
        zero_shot = inference.personalized_model(
            state, ClientState(), Choice({"class_distribution": tuple(map(float, counts))}))
        mine = next(r for r in new["per_client"] if r["client_id"] == cid)
        assert mine["class_weighted"] == pytest.approx(
            correct_share(zero_shot, test, counts), abs=1e-9)


def test_paired_counts_and_report_put_zero_shot_beside_generic(run):
    _, result = run
    final = json.loads((result.run_dir / "final.json").read_text())
    new = final["new_clients"]
    zero_shot = {r["client_id"]: r for r in new["per_client"]}  # ft_epochs = 0: the zero-shot
    pairs = [(zero_shot[g["client_id"]]["class_weighted"], g["class_weighted"])
             for g in new["generic"]["per_client"]]
    counts = new["versus_generic"]["zero_shot"]["class_weighted"]
    assert counts == {"clients": NEW, "beats": sum(z > g for z, g in pairs),
                      "ties": sum(z == g for z, g in pairs), "loses": sum(z < g for z, g in pairs)}
    assert new["versus_generic"]["summary"] == new["versus_generic"]["zero_shot"]
    assert new["versus_generic"]["zero_shot"]["own_top1"]["clients"] == NEW
    report = (result.run_dir / "report.md").read_text()
    generic_mean = new["generic"]["summary"]["class_weighted_mean"]
    assert f"| generic | {generic_mean:.4f} |" in report
    assert (f"| zero_shot | {new['by_choice']['zero_shot']['class_weighted_mean']:.4f} | "
            in report)
    assert f"{counts['beats']} of {NEW} ({counts['ties']} ties)" in report
