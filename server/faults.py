"""Named crash points for the kill tests.

``PFLKIT_CRASH_AT=<point>`` makes the server SIGKILL itself when it reaches that point, so a
test can stop it exactly mid-upload or mid-aggregation instead of hoping a timer lands there.
Unset (always, in production) it costs one dictionary lookup. With ``PFLKIT_CRASH_ONCE=<file>``
only the first process to reach the point dies (it creates the file): a Ray worker that is
restarted and handed the same client again then survives.

``PFLKIT_SLOW_AT=<point>:<seconds>`` makes a process wait that long at a slow point: a Ray
worker that starts slowly, as on a loaded machine, so a test can kill one and check that its
client waits for the restart instead of burning its retries.
"""

from __future__ import annotations

import os
import signal
import time

POINTS = ("upload_after_blob", "upload_after_commit", "close_mid_fold", "close_after_blob",
          "ray_worker_fit")


def crash_point(name: str) -> None:
    """SIGKILL this process if ``$PFLKIT_CRASH_AT`` names this point."""
    if os.environ.get("PFLKIT_CRASH_AT") != name:
        return
    once = os.environ.get("PFLKIT_CRASH_ONCE")
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)


def slow_point(name: str) -> None:
    """Sleep if ``$PFLKIT_SLOW_AT`` is ``<name>:<seconds>``."""
    point, _, seconds = os.environ.get("PFLKIT_SLOW_AT", "").partition(":")
    if point == name:
        time.sleep(float(seconds))
