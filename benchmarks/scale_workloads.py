"""bench-scale's workloads, defined once (the Flower harness and the GPU section import them)."""

from __future__ import annotations

from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ExecutionConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)

# Rounds planned in the configs: the learning-rate schedule and SuPerFed's start round follow
# them; bench-scale times only the first few.
PLANNED_ROUNDS = 100


def fedavg_config(execution: ExecutionConfig | None = None) -> SimConfig:
    """(a) FedAvg, FMNIST Dir(0.3), 100 clients, 20 per round, E=5, B=40, FedRoD's ConvNet."""
    return SimConfig(
        seed=0, rounds=PLANNED_ROUNDS, eval_interval=10_000, checkpoint_interval=10_000,
        data=DataConfig(dataset="fmnist", kind="dirichlet", num_clients=100, alpha=0.3),
        model=ModelConfig("fedrod_convnet"), algorithm=AlgorithmConfig("fedavg"),
        training=TrainingConfig(clients_per_round=20, epochs=5, batch_size=40, lr=0.01,
                                lr_decay=0.99, momentum=0.9, weight_decay=1e-5),
        execution=execution or ExecutionConfig(),
    )


def superfed_config(execution: ExecutionConfig | None = None) -> SimConfig:
    """(b) SuPerFed-MM, FMNIST 2 shards per client, 50 clients, TwoNN, 5 per round, E=10, B=10.

    ``start_fraction = 0``: every timed round is a mixing round (the method's real cost; the
    paper's first 40% of rounds are plain FedProx).
    """
    return SimConfig(
        seed=0, rounds=PLANNED_ROUNDS, eval_interval=10_000, checkpoint_interval=10_000,
        data=DataConfig(dataset="fmnist", kind="shards", num_clients=50, shards_per_client=2,
                        test_fraction=0.2),
        model=ModelConfig("twonn"),
        algorithm=AlgorithmConfig("superfed_mm", {"start_fraction": 0.0}),
        training=TrainingConfig(clients_per_round=5, epochs=10, batch_size=10, lr=0.01,
                                lr_decay=0.99, momentum=0.9, weight_decay=1e-4),
        execution=execution or ExecutionConfig(),
    )


def many_clients_config(execution: ExecutionConfig | None = None) -> SimConfig:
    """(c') FedAvg, FedRoD ConvNet, 1000 iid clients, all 1000 per round, E=1, B=20."""
    return SimConfig(
        seed=0, rounds=PLANNED_ROUNDS, eval_interval=10_000, checkpoint_interval=10_000,
        data=DataConfig(dataset="fmnist", kind="iid", num_clients=1000),
        model=ModelConfig("fedrod_convnet"), algorithm=AlgorithmConfig("fedavg"),
        training=TrainingConfig(clients_per_round=1000, epochs=1, batch_size=20, lr=0.01,
                                lr_decay=0.99, momentum=0.9, weight_decay=1e-5),
        execution=execution or ExecutionConfig(),
    )
