"""Failed-authentication throttling per client address (in each worker process).

Every refused credential (unknown client secret, wrong admin token, unknown enrollment token)
counts against the address it came from. An address with ``limit`` failures within the last
``window`` seconds gets ``429 Too Many Requests`` with ``Retry-After`` for every request that
needs credentials, before any database lookup, until its oldest counted failure leaves the
window: guessing costs the attacker time and the server nothing. The count lives in each worker
process, so with N workers an address may fail up to N x ``limit`` times per window; addresses
are forgotten oldest first beyond ``max_addresses``, which bounds the memory.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque

from pflkit.server.errors import TooManyRequests


class FailedAuthThrottle:
    """Sliding-window counts of failed authentications per address."""

    def __init__(self, limit: int, window: float, max_addresses: int = 100_000) -> None:
        self.limit = limit
        self.window = window
        self.max_addresses = max_addresses
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def _recent(self, address: str, now: float) -> deque[float] | None:
        times = self._failures.get(address)
        if times is not None:
            while times and times[0] <= now - self.window:
                times.popleft()
            if not times:
                del self._failures[address]
                return None
        return times

    def check(self, address: str) -> None:
        """Raise :class:`TooManyRequests` (429) if ``address`` is over its limit now."""
        now = time.monotonic()
        with self._lock:
            times = self._recent(address, now)
            if times is not None and len(times) >= self.limit:
                wait = math.ceil(times[0] + self.window - now)
                raise TooManyRequests(f"too many failed authentications from {address}; "
                                      f"retry in {wait} s", retry_after=wait)

    def failed(self, address: str) -> None:
        """Count one failed authentication from ``address``."""
        now = time.monotonic()
        with self._lock:
            times = self._recent(address, now)
            if times is None:
                times = self._failures[address] = deque(maxlen=self.limit)
                while len(self._failures) > self.max_addresses:
                    self._failures.popitem(last=False)
            else:
                self._failures.move_to_end(address)
            times.append(now)
