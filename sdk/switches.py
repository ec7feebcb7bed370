"""On/off settings the batched executor turns on for a block and its step code reads.

The executor holds the run's ExecutionConfig; the methods' batched trainers it calls do not take
it. A :class:`Switch` (a ContextVar) carries one of its choices (CUDA graphs, patch-GEMM
convolutions, a compiled loss) into :func:`pflkit.sdk.batched_training.train_together` without
threading it through every method's ``fit_batch``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar


class Switch:
    """One named on/off setting, off unless a :meth:`turned` block says otherwise."""

    def __init__(self, name: str) -> None:
        self._var: ContextVar[bool] = ContextVar(f"pflkit_{name}", default=False)

    @property
    def on(self) -> bool:
        """Whether the innermost :meth:`turned` block around this call enabled it."""
        return self._var.get()

    @contextlib.contextmanager
    def turned(self, enabled: bool) -> Iterator[None]:
        """The setting is ``enabled`` within this block."""
        token = self._var.set(enabled)
        try:
            yield
        finally:
            self._var.reset(token)
