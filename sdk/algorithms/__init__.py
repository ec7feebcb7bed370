"""Client trainers and aggregation rules, one module per method, behind one contract."""

from pflkit.sdk.algorithms import fedavg, local  # noqa: F401  (registers the algorithms)
from pflkit.sdk.algorithms.base import (
    ALGORITHMS,
    Aggregator,
    Algorithm,
    Choice,
    ClientState,
    FitResult,
    HyperparameterError,
    LocalTraining,
    ModelFactory,
    RoundContext,
    State,
    WeightedMean,
    make_algorithm,
)

__all__ = [
    "ALGORITHMS",
    "Aggregator",
    "Algorithm",
    "Choice",
    "ClientState",
    "FitResult",
    "HyperparameterError",
    "LocalTraining",
    "ModelFactory",
    "RoundContext",
    "State",
    "WeightedMean",
    "make_algorithm",
]
