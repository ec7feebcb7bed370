"""A client whose local training diverges loses its round; the run goes on without it.

One client's training rows hold a NaN (its fits end in NaN weights, as LG-FedAvg's and
Local-only's fits at the SuPerFed lr did on a GPU, issue 22). Before, the first such update
stopped the run (UpdateRejected); now the round aggregates the other clients, the diverged one
keeps its state from before the round, and the metrics row names it.
"""

import json
import logging
import math

import pytest
import torch
from server_harness import run_toml
from waiting import GUARD

from pflkit.sdk.client import FederatedClient, RetryPolicy
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.run_config import (
    AggregationConfig,
    AlgorithmConfig,
    DataConfig,
    ExecutionConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.server.simulator import Simulation

ROUNDS = 2


def config(algorithm, executor, aggregation=None):
    return SimConfig(
        seed=3, rounds=ROUNDS, eval_interval=ROUNDS, checkpoint_interval=ROUNDS,
        data=DataConfig(dataset="digits", kind="dirichlet", num_clients=6, alpha=0.5, min_size=30,
                        test_fraction=0.2),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig(algorithm),
        training=TrainingConfig(clients_per_round=6, epochs=1, batch_size=16, lr=0.05),
        aggregation=aggregation or AggregationConfig(),
        execution=ExecutionConfig(executor=executor),
    )


def finite(state):
    return all(bool(torch.isfinite(t).all()) for t in state.values() if t.is_floating_point())


@pytest.mark.parametrize(("algorithm", "executor", "aggregation"), [
    ("fedavg", "sequential", None),  # stacked updates, no client state
    ("lg_fedavg", "batched", None),  # a personal body and a shared head, one program
    ("local", "batched", None),  # nothing uploaded: only the state shows the divergence
    # devices clip: each update is checked and folded on its own (the streamed path)
    ("fedavg", "sequential", AggregationConfig(dp_clip_norm=1.0, dp_noise_multiplier=0.5,
                                               dp_clip_on_device=True)),
])
def test_a_diverged_client_is_dropped_keeps_its_state_and_is_named(tmp_path, caplog, algorithm,
                                                                    executor, aggregation):
    sim = Simulation(config(algorithm, executor, aggregation), tmp_path / "run", progress=False)
    bad = sorted(sim.federation.clients)[1]
    sim.federation.clients[bad].train.x[0, 0] = math.nan  # every fit of it ends in NaN
    before = {k: v.clone() for k, v in sim.client_state(bad).tensors.items()}
    start = {k: v.clone() for k, v in sim.coordinator.global_state.items()}
    with caplog.at_level(logging.WARNING, logger="pflkit.server.sim_divergence"):
        result = sim.run()

    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text()
            .splitlines()]
    assert [r["diverged"] for r in rows] == [[bad]] * ROUNDS
    assert all(math.isfinite(r["train_loss"]) for r in rows)
    assert f"round 1: client {bad}'s local training diverged" in caplog.text
    state = sim.client_state(bad).tensors
    assert state.keys() == before.keys() and all(torch.equal(state[k], before[k]) for k in state)
    assert finite(result.global_state)
    if algorithm != "local":  # the other clients' updates were aggregated
        assert any(not torch.equal(result.global_state[k], start[k]) for k in start)
    # the final evaluation scored every client (the diverged one with its kept state)
    report = (tmp_path / "run" / "report.md").read_text()
    assert f"{ROUNDS} client fit(s) ended with NaN" in report
    assert f"client {bad} in round 0, client {bad} in round 1." in report


def test_a_diverged_post_federation_stage_is_scored_from_the_state_before_it(tmp_path, caplog):
    """FedAvg+FT fine-tunes every client after the rounds: the poisoned one's fine-tune diverges
    and it is scored with the global model, the state it had before the stage."""
    sim = Simulation(config("fedavg_ft", "batched"), tmp_path / "run", progress=False)
    bad = sorted(sim.federation.clients)[1]
    sim.federation.clients[bad].train.x[0, 0] = math.nan
    with caplog.at_level(logging.WARNING, logger="pflkit.server.sim_divergence"):
        result = sim.run()
    assert result.final["diverged"] == [bad]
    assert f"client {bad}'s post-federation stage diverged" in caplog.text
    final = json.loads((tmp_path / "run" / "final.json").read_text())
    scored = {c["client_id"]: c for c in final["clients"]["per_client"]}
    assert final["diverged"] == [bad] and math.isfinite(scored[bad]["own_top1"])
    report = (tmp_path / "run" / "report.md").read_text()
    assert f"1 client(s)' post-federation stage diverged; they were scored with their state " \
           f"from before it: clients {bad}." in report


def test_a_device_whose_fit_diverges_uploads_nothing_and_keeps_its_state(make_server, tmp_path,
                                                                         caplog):
    """On a phone: the same fit is not uploaded (the server would refuse it), the device's
    state stays, and polling again in that round does not train it again."""
    steep = run_toml("fedper", rounds=1, num_clients=3, per_round=1).replace(
        "epochs = 1\nbatch_size = 50\nlr = 0.05\nmomentum = 0.5",
        "epochs = 5\nbatch_size = 5\nlr = 10.0\nmomentum = 0.9")
    server = make_server(steep, "--min-enrolled", "1")
    generator = torch.Generator().manual_seed(0)
    data = LabeledTensors(torch.rand(20, 1, 28, 28, generator=generator) * 1e4,
                          torch.arange(20) % 10)  # finite rows a steep lr blows up on
    device = FederatedClient(server.url, tmp_path / "device", data, token=server.token(),
                             retry=RetryPolicy(cap=0.5, max_elapsed=GUARD))
    server.wait_for(lambda s: s["current_round"] is not None)
    uploads = []
    device.connection.http.event_hooks["request"].append(
        lambda request: uploads.append(request) if request.method == "PUT" else None)
    with caplog.at_level(logging.WARNING, logger="pflkit.sdk.client"):
        first, again = device.step(), device.step()
    assert (first.status, first.round) == ("diverged", 0) and again.status == "diverged"
    assert caplog.text.count("round 0: local training diverged") == 1  # trained once
    assert uploads == [] and device.store.load() is None
    assert not (device.state_dir / "pending.safetensors").exists()
    device.close()


def test_a_device_whose_post_federation_stage_diverges_keeps_its_state_from_before(
        make_server, tmp_path, caplog):
    """FedAvg+FT's fine-tune at a steep ft_lr blows up on the device after the run: the device
    keeps the state it had (none: FedAvg's global model is its model), as pfl-sim does."""
    steep = run_toml("fedavg_ft", rounds=1, num_clients=3, per_round=1,
                     params="ft_lr = 10.0\nft_epochs = 5").replace("lr = 0.05", "lr = 0.0001")
    server = make_server(steep, "--min-enrolled", "1")
    generator = torch.Generator().manual_seed(0)
    data = LabeledTensors(torch.rand(20, 1, 28, 28, generator=generator) * 1e4,
                          torch.arange(20) % 10)
    device = FederatedClient(server.url, tmp_path / "device", data, token=server.token(),
                             retry=RetryPolicy(cap=0.5, max_elapsed=GUARD))
    server.wait_for(lambda s: s["current_round"] is not None)
    assert device.step().status == "trained"  # the round itself stays finite
    server.wait_for(lambda s: s["rounds_done"] == 1)
    with caplog.at_level(logging.WARNING, logger="pflkit.sdk.client"):
        assert device.step().status == "finished"
    assert "the post-federation stage diverged" in caplog.text
    state = device.store.load()
    assert state is not None and state.tensors == {}  # FedAvg keeps no private tensors
    model = device.personalized_model()
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    device.close()
