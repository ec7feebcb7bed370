"""Small pfl-sim run directories (digits, TwoNN, a few clients), built once per test worker."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.server.simulator import Simulation

sys.path.insert(0, str(Path(__file__).parent))  # test_bad_inputs' helpers for test_refusals

# Keep post-federation stages short; every other algorithm runs with its defaults.
FAST_PARAMS = {"pflmoe": {"epochs": 1}, "fedavg_ft": {"ft_epochs": 1}}


def run_config(algorithm: str, rounds: int = 2, new_clients: int = 0, **params: object
               ) -> SimConfig:
    """A seconds-long run on scikit-learn's digits with per-client test rows."""
    return SimConfig(
        seed=0, rounds=rounds, eval_interval=rounds, checkpoint_interval=1,
        data=DataConfig(dataset="digits", kind="dirichlet", num_clients=4 + new_clients,
                        alpha=1.0, test_fraction=0.25, num_new_clients=new_clients),
        model=ModelConfig("twonn"),
        algorithm=AlgorithmConfig(algorithm, {**FAST_PARAMS.get(algorithm, {}), **params}),
        training=TrainingConfig(clients_per_round=4, epochs=1, batch_size=32, lr=0.05),
    )


@pytest.fixture(scope="session")
def make_run(tmp_path_factory):
    """``make_run(algorithm, new_clients=0)`` -> the run directory (cached per worker)."""
    runs: dict[tuple[str, int], Path] = {}

    def make(algorithm: str, new_clients: int = 0) -> Path:
        if (algorithm, new_clients) not in runs:
            path = tmp_path_factory.mktemp(f"run-{algorithm}")
            Simulation(run_config(algorithm, new_clients=new_clients), path / "run",
                       progress=False).run()
            runs[algorithm, new_clients] = path / "run"
        return runs[algorithm, new_clients]

    return make


@pytest.fixture(scope="session")
def config_for():
    """``config_for(algorithm, **params)`` -> the SimConfig of :func:`run_config`."""
    return run_config
