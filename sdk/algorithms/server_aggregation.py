"""The server-aggregation role: what the server runs (pfl-server's runs, the simulator).

A method's ``Aggregation`` class makes the round-0 global state, says what an update may hold,
folds a round's updates into the next global state and answers the queries a server serves
for its clients on the newest global state. Default: FedAvg's weighted mean, no queries.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from pflkit.sdk.algorithms.aggregators import Aggregator, State, WeightedMean
from pflkit.sdk.algorithms.role import Role
from pflkit.sdk.models import float_state
from pflkit.sdk.seeding import derive_seed


class ServerAggregation(Role):
    """The server's side of a method; called by the Coordinator, the run store and the API."""

    def init_global(self, seed: int) -> State:
        """The round-0 global state (seeded model weights)."""
        return float_state(self.model_factory.build(derive_seed(seed, "global-init")))

    def new_aggregator(self, global_state: State, population: int) -> Aggregator:
        """How the server combines this round's updates (default: weighted mean).

        ``population`` is the number of clients the round samples from (SCAFFOLD's N).
        """
        return WeightedMean(global_state)

    def update_schema(self, global_state: State) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Names, shapes and dtypes an update may contain (the server validates against it)."""
        return {k: (tuple(v.shape), v.dtype) for k, v in global_state.items()}

    def queries(self) -> Mapping[str, Callable[[State, Any], State]]:
        """Computations on the newest global state that a server answers for its clients.

        Name -> function of (global state, the request's JSON body) -> named tensors, served
        as ``POST /v1/runs/{run}/queries/{name}`` (safetensors); a ValueError is the client's
        mistake (422). FedRoD offers ``head``; default: none.
        """
        return {}
