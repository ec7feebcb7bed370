"""Known, harmless output of torch and the ExecuTorch runtime, kept off the user's terminal.

Every ``pfl-export`` printed about 7 such lines: torch's pytree warning that torchao registers
an Enum with ``register_constant`` (logged once, when ExecuTorch imports torchao), and the
runtime's info lines, written by native code straight to file descriptor 2 when its thread
pool is set (``[cpuinfo_utils.cpp:71] Reading file ...``, ``[threadpool.cpp:66] Resetting
threadpool to 1 threads.``). Only those exact messages are dropped, and the native ones only
while the thread pool is set: every other line still reaches stderr, so no real error is hidden.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

PYTREE_NOISE = "register_constant() on Enum subclasses is deprecated"
NATIVE_NOISE = re.compile(
    rb"\[(cpuinfo_utils\.cpp:\d+\] (Reading file |Failed to open midr file |CPU info and "
    rb"manual query on # of cpus dont match)|threadpool\.cpp:\d+\] Resetting threadpool to "
    rb"\d+ threads\.)")
_threads: int | None = None  # the runtime's thread pool is per process: set it once


class _DropPytreeNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return PYTREE_NOISE not in record.getMessage()


logging.getLogger("torch.utils._pytree").addFilter(_DropPytreeNoise())


def _forward(pipe_fd: int, stderr_fd: int) -> None:
    with os.fdopen(pipe_fd, "rb") as pipe:
        for line in pipe:
            if not NATIVE_NOISE.match(line):
                os.write(stderr_fd, line)


@contextmanager
def native_noise_dropped() -> Iterator[None]:
    """Inside the block, file descriptor 2 goes through a filter of :data:`NATIVE_NOISE`."""
    sys.stderr.flush()
    stderr_fd = os.dup(2)
    pipe_read, pipe_write = os.pipe()
    os.dup2(pipe_write, 2)
    os.close(pipe_write)
    forwarder = threading.Thread(target=_forward, args=(pipe_read, stderr_fd), daemon=True)
    forwarder.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(stderr_fd, 2)  # closes the pipe's last write end: the forwarder sees EOF
        forwarder.join()
        os.close(stderr_fd)


def set_runtime_threads(threads: int) -> None:
    """Size the ExecuTorch runtime's thread pool (XNNPACK) once per process, quietly."""
    global _threads
    from executorch.extension.pybindings import portable_lib

    if _threads != threads and hasattr(portable_lib, "_unsafe_reset_threadpool"):
        with native_noise_dropped():
            portable_lib._unsafe_reset_threadpool(threads)
        _threads = threads
