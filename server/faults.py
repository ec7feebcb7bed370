"""Named crash points for the kill tests.

``PFLKIT_CRASH_AT=<point>`` makes the server SIGKILL itself when it reaches that point, so a
test can stop it exactly mid-upload or mid-aggregation instead of hoping a timer lands there.
Unset (always, in production) it costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

POINTS = ("upload_after_blob", "upload_after_commit", "close_mid_fold", "close_after_blob")


def crash_point(name: str) -> None:
    """SIGKILL this process if ``$PFLKIT_CRASH_AT`` names this point."""
    if os.environ.get("PFLKIT_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
