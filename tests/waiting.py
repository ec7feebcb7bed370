"""How the tests wait: for an event (a line, a status, a file, an exit), never for seconds.

``GUARD`` is the one time limit. It only stops a test that would otherwise hang forever (a lost
process, a deadlock); it is no pass criterion. ``make test`` on a loaded 2-core machine took
59 min, and a 30 s limit on an exit that was still coming failed a correct run (issue 21).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

GUARD = 1800.0  # seconds

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], what: str, poll: float = 0.1) -> T:
    """Poll ``predicate`` until it returns something truthy; return that."""
    deadline = time.monotonic() + GUARD
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached within the {GUARD:.0f} s guard")
        time.sleep(poll)
    return value
