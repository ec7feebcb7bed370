"""In the simulator a client whose local training diverged loses its round; the run goes on.

At a paper's own learning rate some clients' local training blows up (sdk/divergence.py): on
the SuPerFed TwoCNN setting (lr 0.01, momentum 0.9), a Local-only client training a fresh model
on its two classes reached a mean batch loss of 418 on the CPU, and such fits ended in NaN
weights on a GPU, whose float rounding differs (LG-FedAvg and Local-only, issue 22). The server
rejects a non-finite upload and its round goes on without it; the simulator does the same: its
update is not aggregated, it keeps the state it had before the round, its loss stays out of
the round's mean, and the round's metrics row names it under ``diverged`` (a warning says so
too). A post-federation stage that diverges is dropped the same way: the client is scored
with its state from before the stage and final.json lists it under ``diverged``. Finite
weights are never judged, however large the loss. A round whose aggregate is not finite
(:class:`~pflkit.server.coordinator.GlobalDiverged`) stops the run, as on the server: every
client would train from it; ``--resume`` would repeat it, so the error does not offer it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from pflkit.sdk.algorithms.base import ClientState
from pflkit.sdk.divergence import finite_fit, finite_state
from pflkit.server.coordinator import Coordinator, GlobalDiverged
from pflkit.server.executors import FitBatch

log = logging.getLogger(__name__)


def submit_finite_rows(coordinator: Coordinator, client_ids: Sequence[int], batch: FitBatch
                       ) -> list[int]:
    """Submit a stacked batch's clients that did not diverge; the positions of those that did.

    The coordinator checks the updates as stacks once (on the GPU where they are there) and
    leaves out the non-finite rows; losses and kept states are checked here.
    """
    results, updates = batch.results, batch.updates
    assert isinstance(results, list) and updates is not None  # a stacked batch
    on_device = batch.device_updates
    unfit = [k for k, r in enumerate(results) if not finite_fit(r)]
    keep = [k for k in range(len(results)) if k not in unfit]
    if unfit:
        updates = {n: t[keep] for n, t in updates.items()}
        on_device = None if on_device is None else {n: t[keep] for n, t in on_device.items()}
    dropped = coordinator.submit_stacked([client_ids[k] for k in keep],
                                         [results[k].num_samples for k in keep], updates,
                                         on_device, drop_nonfinite=True)
    return sorted(unfit + [keep[j] for j in dropped])


def warn(round_index: int, client_id: int) -> None:
    """One line per diverged client."""
    log.warning("round %d: client %d's local training diverged (non-finite weights or loss); "
                "its update is dropped and it keeps its state from before the round",
                round_index, client_id)


def stage_result(client_id: int, before: ClientState, after: ClientState,
                 diverged_ids: list[int]) -> ClientState:
    """A post-federation stage's state, or where it diverged the one before (noted, warned)."""
    if finite_state(after.tensors):
        return after
    log.warning("client %d's post-federation stage diverged (non-finite weights); it is scored "
                "with its state from before the stage", client_id)
    diverged_ids.append(client_id)
    return before


def what_next(err: Exception, run_dir: Path) -> str:
    """What a user can do with a run that failed after committing rounds."""
    if isinstance(err, GlobalDiverged):  # the same seed and config diverge the same way
        return ("its global model diverged, which --resume would repeat: start a new run with "
                "other settings (a lower training.lr, say), or delete it")
    return f"continue with pfl-sim --resume {run_dir} once the cause is fixed, or delete it"
