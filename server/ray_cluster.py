"""Joining, sizing and quieting a Ray cluster for the ray executor, before any worker is asked for.

Two ways a Ray run could wait forever rather than fail: ``ray.init`` retries an address nobody
answers at for minutes, inside C++ code that holds the main thread (Ctrl-C waited with it: a run
printed connection warnings for 854 s), and a worker that no node can place waits for resources
forever, and with it every client sent to it (``num_cpus = 4`` on a 2-core machine hung without
a word). Both are refused here in one line.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Iterator
from typing import Any

from pflkit.sdk.config_types import ConfigError
from pflkit.sdk.execution_config import ExecutionConfig

UNIT = 10_000  # Ray counts resources in 1/10000: 0.1 CPU fits 20 times in 2


def check_reachable(address: str, timeout: float) -> None:
    """Refuse ``address`` (HOST:PORT or ray://HOST:PORT) if nothing accepts a connection there.

    ``auto`` and ``local`` are left to Ray, which fails at once when it finds no cluster.
    """
    if address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"execution.ray_address: expected HOST:PORT, ray://HOST:PORT or auto, "
                         f"got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        reason = "no answer" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise ConnectionError(f"execution.ray_address: no Ray cluster at {address} ({reason} "
                              f"within execution.ray_connect_timeout = {timeout:g} s)") from None


@contextlib.contextmanager
def ctrl_c_kills() -> Iterator[None]:
    """Ctrl-C ends the process at once (its default action) instead of waiting for Python."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield  # a handler of the caller's, or SIGINT ignored: left as it is
        return
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def placeable(nodes: list[dict[str, Any]], num_cpus: float, num_gpus: float) -> int:
    """How many workers of ``num_cpus`` and ``num_gpus`` the live ``nodes`` (``ray.nodes()``) hold.

    A worker runs on one node, so each node is counted on its own: a cluster's totals overstate
    it (two 3-CPU nodes hold two 2-CPU workers, not three).
    """
    total = 0
    for node in nodes:
        have = node.get("Resources", {}) if node.get("Alive") else {}
        fits = round(have.get("CPU", 0.0) * UNIT) // round(num_cpus * UNIT)
        if num_gpus > 0:
            fits = min(fits, round(have.get("GPU", 0.0) * UNIT) // round(num_gpus * UNIT))
        total += fits
    return total


def worker_count(nodes: list[dict[str, Any]], settings: ExecutionConfig) -> int:
    """``settings.workers``, or as many as the nodes place; a count they cannot place is refused."""
    fits = placeable(nodes, settings.num_cpus, settings.num_gpus)
    if fits and (settings.workers or 0) <= fits:
        return settings.workers or fits
    need = f"num_cpus = {settings.num_cpus:g}" + \
        (f", num_gpus = {settings.num_gpus:g}" if settings.num_gpus else "")
    if fits:
        raise ConfigError(f"execution.workers: {settings.workers} workers of {need} do not fit "
                          f"on the Ray cluster's nodes (at most {fits} do)")
    short = "num_gpus" if settings.num_gpus and placeable(nodes, settings.num_cpus, 0) else \
        "num_cpus"
    raise ConfigError(f"execution.{short}: no node of the Ray cluster has {need} for a worker "
                      f"(largest: {_largest(nodes)})")


def _largest(nodes: list[dict[str, Any]]) -> str:
    """The largest live node's CPUs and GPUs, as an error message names them."""
    live = [n.get("Resources", {}) for n in nodes if n.get("Alive")] or [{}]
    cpus = max(r.get("CPU", 0.0) for r in live)
    gpus = max(r.get("GPU", 0.0) for r in live)
    return f"{cpus:g} CPUs, {gpus:g} GPUs"


def quiet_ray() -> dict[str, Any]:
    """``ray.init`` options that follow this process's log level (``pfl-sim --quiet``: errors).

    Ray logs to its own handlers ("Started a local Ray instance", its token-auth notice), which
    ``logging.basicConfig`` does not reach. (Its C++ notice that restartable workers take their
    arguments from the object store stays: they do, kept referenced for the run, and
    ``RAY_BACKEND_LOG_LEVEL`` only trades it for a notice of its own.)
    """
    return {"log_to_driver": False,
            "logging_level": max(logging.getLogger().getEffectiveLevel(), logging.WARNING)}
