"""The pending round file: its bytes round-trip, and it is committed only when the round is over."""

from __future__ import annotations

import pytest
import torch

from pflkit.sdk.algorithms.base import ClientState
from pflkit.sdk.pending_round import PendingRound
from pflkit.sdk.tensorio import state_from_bytes

PENDING = PendingRound(run_id=3, round=5, num_samples=40, metrics={"loss": 0.5},
                       upload=b"update bytes", client_state=ClientState(
                           {"personal/w": torch.arange(4.0)}, {"seen": 2}))


def test_pending_round_round_trips_with_the_upload_bytes_unchanged():
    data = PENDING.to_bytes()
    back = PendingRound.from_bytes(data)
    assert (back.run_id, back.round, back.num_samples, back.metrics, back.upload) == (
        3, 5, 40, {"loss": 0.5}, b"update bytes")
    assert back.client_state.meta == {"seen": 2}
    assert torch.equal(back.client_state.tensors["personal/w"], torch.arange(4.0))
    # the layout older releases wrote, so a pending file left by an update still loads
    assert set(state_from_bytes(data)) == {"upload", "state/personal/w"}


@pytest.mark.parametrize(("task", "over"), [
    ({"status": "train", "run_id": 3, "round": 5}, False),     # not uploaded yet: re-send
    ({"status": "paused", "run_id": 3, "round": 5}, False),    # paused: keep the bytes
    ({"status": "wait", "run_id": 3, "round": None}, False),   # between rounds: keep
    ({"status": "uploaded", "run_id": 3, "round": 5}, True),   # the server has it
    ({"status": "train", "run_id": 3, "round": 6}, True),      # a later round: counted or late
    ({"status": "train", "run_id": 4, "round": 0}, True),      # another run
    ({"status": "stopped", "run_id": 3, "round": 5}, True),
    ({"status": "finished", "run_id": 3, "round": None}, True),
])
def test_pending_round_is_over_only_when_the_server_is_done_with_it(task, over):
    assert PENDING.is_over(task) is over
