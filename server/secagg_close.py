"""A secure-aggregation round's close: the survivors' unmasked sum becomes the next global state.

The rule is DP-FedAvg's (``sdk/dp_fedavg.py``) without the server's noise: the global state plus
the unweighted mean of the survivors' changes (with DP: noised by the devices, divided by the
sampled m), on the floating tensors a device uploads (flattened
in name order, as :func:`~pflkit.sdk.secagg.wire.round_setup` lays them out); integer tensors
keep the global value (they are not masked). Sample counts stay on the devices: a weight would
tell the server something about each one. A round that failed keeps the global state and says
why in its metrics (``secagg_error``).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import torch

from pflkit.sdk.algorithms.base import State
from pflkit.sdk.secagg.messages import RoundFailed
from pflkit.sdk.secagg.wire import FLOATING
from pflkit.server.orm import Round
from pflkit.server.secagg_rounds import SecAggRounds
from pflkit.server.store import RunTerms

log = logging.getLogger(__name__)


def mean_change(global_state: State, schema: dict[str, tuple[list[int], str]],
                total: np.ndarray, count: int) -> State:
    """``global + total / count`` on the schema's floating tensors (``total``: their sum)."""
    new = dict(global_state)
    offset = 0
    for name, (shape, dtype) in sorted(schema.items()):
        if dtype not in FLOATING:
            continue
        size = math.prod(shape)
        change = torch.from_numpy(total[offset:offset + size] / count).reshape(shape)
        new[name] = (global_state[name].double() + change).to(global_state[name].dtype)
        offset += size
    return new


def secagg_global(rounds: SecAggRounds, rnd: Round, terms: RunTerms,
                  global_state: State) -> tuple[State, dict[str, Any]]:
    """The round's new global state and its SecAgg metrics (the old state if it failed)."""
    try:
        aggregate = rounds.aggregate(rnd, terms)
    except RoundFailed as err:
        log.warning("round %d: secure aggregation failed: %s", rnd.index, err)
        return global_state, {"secagg_error": str(err)}
    # DP-FedAvg divides by the sampled m, a count that does not depend on any one device
    dp = terms.secagg is not None and terms.secagg.get("dp_clip_norm") is not None
    count = len(rnd.sampled) if dp else len(aggregate.survivors)
    return (mean_change(global_state, terms.schema, aggregate.total, count),
            {"participants": len(aggregate.survivors)})
