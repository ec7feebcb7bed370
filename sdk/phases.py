"""Named phases of a simulated round, for profilers: where a round's wall time goes.

Each phase is a ``torch.profiler`` range named ``pflkit.<phase>`` (sampling, task building,
moving states to the device, the step loop, folding, ...), so one profiled round splits into
them (benchmarks/gpu_round_profile.py). A range costs 10-20 us even when no profiler runs (a
dispatcher call; measured on a shared 2-core box), so phases wrap whole stages of a round (about
15 a round), never one client's work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from torch.profiler import record_function

PREFIX = "pflkit."

# called with (phase, True) on entry and (phase, False) on exit, e.g. to read GPU memory there
Watcher = Callable[[str, bool], None]
_WATCHER: ContextVar[Watcher | None] = ContextVar("pflkit_phase_watcher", default=None)


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """The block as profiler range ``pflkit.<name>`` (a decorator too)."""
    watcher = _WATCHER.get()
    with record_function(PREFIX + name):
        if watcher is not None:
            watcher(name, True)
        try:
            yield
        finally:
            if watcher is not None:
                watcher(name, False)


@contextlib.contextmanager
def watching(watcher: Watcher) -> Iterator[None]:
    """Call ``watcher`` at every phase's entry and exit within this block."""
    token = _WATCHER.set(watcher)
    try:
        yield
    finally:
        _WATCHER.reset(token)
