"""Whether a client's fit diverged: NaN or Inf in its weights or its loss.

At a paper's own learning rate some clients' local training blows up (issue 22: LG-FedAvg and
Local-only on the SuPerFed TwoCNN setting ended in NaN on a GPU). Such a fit is dropped
wherever it runs: the simulator leaves it out of its round (server/sim_divergence.py) and a
device does not upload it and keeps its state (sdk/client.py), as the server would reject it.
Finite weights are never judged, however large the loss.
"""

from __future__ import annotations

import math

import torch

from pflkit.sdk.algorithms.base import FitResult, State


def finite_state(state: State) -> bool:
    """Whether every floating tensor of ``state`` is finite."""
    checks = [torch.isfinite(t).all() for t in state.values() if t.is_floating_point()]
    return not checks or bool(torch.stack(checks).all())


def finite_fit(result: FitResult) -> bool:
    """Whether a fit's loss and the state it keeps are finite (its update is checked apart)."""
    loss = result.metrics.get("train_loss", 0.0)
    return math.isfinite(float(loss)) and finite_state(result.client_state.tensors)


def diverged(result: FitResult) -> bool:
    """Whether a fit left non-finite weights (update or state) or a non-finite loss."""
    return not (finite_fit(result) and finite_state(result.update))
