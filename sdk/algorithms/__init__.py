"""Client trainers and aggregation rules, one module per method, behind one contract.

A method composes four roles (base.py): DeviceTraining, ServerAggregation, Personalization and
Inference, each its own module. Every module in this package is imported here so that its
``@register`` runs: adding a method is adding a file.
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
from pflkit.sdk.algorithms.device_training import DeviceTraining
from pflkit.sdk.algorithms.inference_role import Inference
from pflkit.sdk.algorithms.personalization import Personalization
from pflkit.sdk.algorithms.server_aggregation import ServerAggregation

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "ALGORITHMS",
    "Aggregator",
    "Algorithm",
    "Choice",
    "ClientState",
    "DeviceTraining",
    "FitJob",
    "FitResult",
    "HyperparameterError",
    "Inference",
    "LocalTraining",
    "ModelFactory",
    "Personalization",
    "RoundContext",
    "ServerAggregation",
    "State",
    "WeightedMean",
    "make_algorithm",
]
