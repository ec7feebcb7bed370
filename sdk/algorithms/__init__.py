"""Client trainers and aggregation rules, one module per method, behind one contract.

Every module in this package is imported here so that its ``@register`` runs: adding a method
is adding a file.
"""

import importlib
import pkgutil

from pflkit.sdk.algorithms.base import (
    ALGORITHMS,
    Aggregator,
    Algorithm,
    Choice,
    ClientState,
    FitJob,
    FitResult,
    HyperparameterError,
    LocalTraining,
    ModelFactory,
    RoundContext,
    State,
    WeightedMean,
    make_algorithm,
)

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "ALGORITHMS",
    "Aggregator",
    "Algorithm",
    "Choice",
    "ClientState",
    "FitJob",
    "FitResult",
    "HyperparameterError",
    "LocalTraining",
    "ModelFactory",
    "RoundContext",
    "State",
    "WeightedMean",
    "make_algorithm",
]
