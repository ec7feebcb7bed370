"""A device's part in a secure-aggregation round over HTTP: what it uploads instead of its update.

:class:`~pflkit.sdk.client.FederatedClient` calls :func:`take_part` when the task carries a
SecAgg setup (``wire.TASK_KEY``). The device sends its change to the round's global state (the
floating tensors of its update, flattened in name order) masked: the server learns only the
survivors' sum; with DP it is first put on the quantization grid and noised there
(:class:`~pflkit.sdk.secagg.dp.DpGrid`). The four steps are
:class:`~pflkit.sdk.secagg.client.SecAggClient`'s; a step's
answer that is not ready comes back as 409 with ``Retry-After``, which the connection waits out.
The keys live in memory only: a device restarted mid-round has dropped out of it (the server's
task then says ``uploaded``) and the others recover the round without it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np

from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.algorithms.base import State
from pflkit.sdk.device_files import CACHE, DeviceFiles
from pflkit.sdk.secagg import dp, wire
from pflkit.sdk.secagg.messages import RoundSetup, SecAggError
from pflkit.sdk.transport import json_answer

log = logging.getLogger(__name__)
SECAGG_ROUND = "secagg_round"  # cache.json: [run, round] of the last SecAgg this device began


def change_vector(update: State, global_state: State) -> np.ndarray:
    """The update's change on its floating tensors, float64, flattened in name order.

    Each needs the global state's tensor of its name and shape (one line if missing): a
    broadcast, e.g. of a (1,) tensor, would mask a change that is not the update's.
    """
    floating = [k for k in sorted(update) if update[k].is_floating_point()]
    for k in floating:
        if k not in global_state or global_state[k].shape != update[k].shape:
            raise ValueError(f"secagg: cannot mask {k}: the round's global state has no tensor "
                             f"of its name and shape {tuple(update[k].shape)}")
    parts = [(update[k].double() - global_state[k].double()).cpu().reshape(-1).numpy()
             for k in floating]
    return np.concatenate(parts) if parts else np.zeros(0)


def private_change(secagg: dict[str, Any], setup: RoundSetup, change: np.ndarray) -> np.ndarray:
    """With DP: the change on the round's grid (:class:`~pflkit.sdk.secagg.dp.DpGrid`), noised.

    The noise comes from fresh OS randomness, never from a seed the server knows.
    """
    c, z = secagg.get("dp_clip_norm"), secagg.get("dp_noise_multiplier")
    if c is None and z is None:
        return change
    try:  # a run config's ranges; never sent unclipped or unnoised on a bad setup
        AggregationConfig(dp_clip_norm=c, dp_noise_multiplier=z)
    except ValueError:
        raise SecAggError("secagg: the task's dp_clip_norm and dp_noise_multiplier are not "
                          "both in a run config's ranges (docs/privacy.md)") from None
    try:
        grid = dp.DpGrid.of(setup, float(c), float(z))
    except ValueError as err:
        raise SecAggError(f"secagg: the round's grid cannot carry DP: {err}") from None
    return grid.privatize(change, np.random.default_rng())


def first_attempt(files: DeviceFiles, run_id: int, round_number: int) -> bool:
    """Record that this device starts the round's SecAgg; False if it started it before.

    Called before the first message: a second run of the protocol over the same change (fresh
    masks and DP noise) would give the server two sums to difference or noise to average away,
    so a device takes part once per round, even across restarts.
    """
    cache, this_round = files.read_json(CACHE), [run_id, round_number]
    if cache.get(SECAGG_ROUND) == this_round:
        log.warning("round %s: this device already took part in its secure aggregation and "
                    "never masks the same change twice: waiting for the next round",
                    round_number)
        return False
    files.write_json(CACHE, {**cache, SECAGG_ROUND: this_round})
    return True


def take_part(request: Callable[..., httpx.Response], client_id: int, task: dict[str, Any],
              change: np.ndarray, files: DeviceFiles) -> bool:
    """Run the round's four steps for this device (``request``: its authenticated HTTP call).

    False, with nothing sent, if it began this round's before (``files`` keeps the mark).
    Needs ``cryptography`` (the ``secagg`` extra), imported only by devices in SecAgg runs.
    """
    from pflkit.sdk.secagg.client import SecAggClient

    setup = wire.setup_from_wire(task[wire.TASK_KEY])
    if change.shape != (setup.dimension,):
        raise ValueError(f"secagg: the update has {change.size} floating values, the round "
                         f"masks {setup.dimension}")
    change = private_change(task[wire.TASK_KEY], setup, change)
    device = SecAggClient(client_id, setup)
    if not first_attempt(files, task["run_id"], task["round"]):
        return False
    base = f"/v1/runs/{task['run_id']}/rounds/{task['round']}/secagg"
    r = setup.round_id

    def answer(step: str) -> dict[str, Any]:  # bounded, and one line if not a JSON object
        return json_answer(request("GET", f"{base}/{step}"), f"secagg {step}")

    request("POST", f"{base}/keys", json=wire.keys_to_wire(device.advertise_keys()))
    directory = wire.directory_from_wire(r, answer("keys"))
    request("POST", f"{base}/shares", json=wire.shares_to_wire(device.share_keys(directory)))
    shares = wire.shares_in_from_wire(r, answer("shares"))
    request("PUT", f"{base}/masked", content=device.masked_input(shares, change).vector,
            headers={"Content-Type": "application/octet-stream"})
    ask = wire.request_from_wire(r, answer("unmask"))
    request("POST", f"{base}/unmask", json=wire.unmask_to_wire(device.unmask(ask)))
    return True
