"""Whether a client's fit diverged: NaN or Inf in its weights or its loss.

At a paper's own learning rate some clients' local training blows up (issue 22: LG-FedAvg and
Local-only on the SuPerFed TwoCNN setting ended in NaN on a GPU). Such a fit is dropped
wherever it runs: the simulator leaves it out of its round (server/sim_divergence.py) and a
device does not upload it and keeps its state (sdk/client.py), as the server would reject it.
Finite weights are never judged, however large the loss. A NaN loss is not divergence: it is
the undefined loss of a fit that took no step (``training.epochs = 0``, a client without rows;
``run_epochs``' convention), whose weights are those it started from. A step on a NaN loss
sends NaN into every weight the loss reaches, so the weight checks still catch such a fit.
A device refuses a NaN or Inf global state before it trains (sdk/global_states.py): a fit from
one is the server's fault, never reported as the device's divergence.
"""

from __future__ import annotations

import math

import torch

from pflkit.sdk.algorithms.base import FitResult, State


def finite_state(state: State) -> bool:
    """Whether every floating tensor of ``state`` is finite."""
    checks = [torch.isfinite(t).all() for t in state.values() if t.is_floating_point()]
    return not checks or bool(torch.stack(checks).all())


def non_finite_tensor(state: State) -> str | None:
    """The first (by name) floating tensor of ``state`` with NaN or Inf: what a refusal names."""
    return next((k for k, v in sorted(state.items())
                 if v.is_floating_point() and not bool(torch.isfinite(v).all())), None)


def finite_fit(result: FitResult) -> bool:
    """Whether a fit's loss is not infinite and the state it keeps is finite.

    Its update is checked apart; a NaN loss is a fit without a step (module doc).
    """
    loss = result.metrics.get("train_loss", 0.0)
    return not math.isinf(float(loss)) and finite_state(result.client_state.tensors)


def defined_loss(result: FitResult) -> float | None:
    """A fit's training loss, None where it took no step (NaN) or reports none."""
    loss = float(result.metrics.get("train_loss", math.nan))
    return None if math.isnan(loss) else loss


def diverged(result: FitResult) -> bool:
    """Whether a fit left non-finite weights (update or state) or an infinite loss."""
    return not (finite_fit(result) and finite_state(result.update))
