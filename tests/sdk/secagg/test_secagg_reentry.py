"""A device masks a round's change once, however often the server asks it to start again.

A server that answers 409 to the last SecAgg message and then accepts fresh keys would get the
same change under new masks (and new DP noise) as often as it likes: two sums that differ by
one device give that device's change, and averaging n sums cuts the noise by sqrt(n).
"""

from __future__ import annotations

from hostile_harness import json_answer, serving
from lying_server import LyingServer, secagg_device


class Restarting(LyingServer):
    """Refuses the device's unmask answer with 409 and opens the round afresh, three times."""

    refusals = 3

    def receive(self, step, body):
        if step == "unmask" and self.refusals:
            self.refusals -= 1
            self._reset()
            return json_answer(409, {"detail": "try again"})
        return super().receive(step, body)


def test_a_device_never_masks_the_same_change_twice(tmp_path):
    server = Restarting()
    with serving(server) as http:
        phone = secagg_device(tmp_path, http)
        assert [phone.step().status for _ in range(3)] == ["wait", "wait", "wait"]
        phone.close()
    assert server.posted.count(("PUT", "masked")) == 1
