"""Evaluation that scales: one forward pass per distinct model and per shared body, same numbers."""

import math

import pytest

from pflkit.sdk.evaluation import evaluate_client
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.scoring import ScoringCache, fingerprint
from pflkit.server.simulator import Simulation

CLIENTS = 5


def trained(tmp_path, algorithm, params=None):
    cfg = SimConfig(
        seed=2, rounds=2, eval_interval=2, checkpoint_interval=2,
        data=DataConfig(dataset="digits", kind="dirichlet", num_clients=CLIENTS, alpha=0.5,
                        min_size=20, test_fraction=0.2),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig(algorithm, params or {}),
        training=TrainingConfig(clients_per_round=CLIENTS, epochs=1, batch_size=32, lr=0.05),
    )
    sim = Simulation(cfg, tmp_path / algorithm, progress=False)
    sim.run_round()
    sim.run_round()
    return sim


def client_models(sim):
    state = sim.coordinator.global_state
    for cid, client in sim.federation.clients.items():
        cstate = sim.client_state(cid)
        if sim.algorithm.personalization.has_stage:
            cstate = sim.algorithm.personalization.personalize(state, cstate, client.train,
                                                               sim.context(cid, sim.config.rounds))
        yield client, sim.algorithm.inference.personalized_model(state, cstate)


def same(a, b):
    return all(x == y or (math.isnan(x) and math.isnan(y))
               for x, y in zip(a.to_dict().values(), b.to_dict().values(), strict=True))


# (algorithm, params, global-test forward passes of whole models, bodies run on the global test)
CASES = [
    ("fedavg", None, 1, 1),  # every client's model is the global model
    ("fedper", None, CLIENTS, 1),  # one shared body, personal heads
    ("fedrep", {"body_epochs": 0}, CLIENTS, 1),  # E = 1: the one epoch trains the heads
    ("fedrod_hyper", None, CLIENTS, 1),
    ("fedrod_linear", None, CLIENTS, 1),
    ("pflmoe", {"variant": "mfe", "epochs": 2}, CLIENTS, 1),  # frozen shared extractor
    ("superfed_mm", None, CLIENTS, CLIENTS),  # every client has its own body
]


@pytest.mark.parametrize("algorithm, params, models, bodies", CASES)
def test_cached_scores_equal_scoring_every_model_alone(tmp_path, algorithm, params, models,
                                                       bodies):
    sim = trained(tmp_path, algorithm, params)
    cache, test, classes = ScoringCache(), sim.federation.test, sim.federation.spec.num_classes
    for client, model in client_models(sim):
        alone = evaluate_client(model, client, test, classes)
        cached = evaluate_client(model, client, test, classes, cache.predict)
        assert same(alone, cached), (alone, cached)
    own_tests = CLIENTS  # each client's own test rows are distinct data: scored per client
    assert cache.models_run == models + own_tests
    assert cache.bodies_run == bodies + own_tests


def test_fingerprint_tells_models_apart_by_weights_not_by_identity(tmp_path):
    sim = trained(tmp_path, "fedavg")
    state = sim.coordinator.global_state
    a, b = sim.algorithm.inference.global_model(state), sim.algorithm.inference.global_model(state)
    assert a is not b and fingerprint(a) == fingerprint(b)
    with __import__("torch").no_grad():
        b.head.bias[0] += 1e-6
    assert fingerprint(a) != fingerprint(b)
