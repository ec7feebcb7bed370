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
MOST_WORKERS = 1024  # execution.workers' largest value, and so the most a default count starts


def check_reachable(address: str, timeout: float) -> None:
    """Refuse ``address`` (HOST:PORT or ray://HOST:PORT) if nothing accepts a connection there.

    ``auto`` and ``local`` are left to Ray, which fails at once when it finds no cluster.
    """
    if address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"execution.ray_address: expected HOST:PORT (PORT in [1, 65535]), "
                         f"ray://HOST:PORT or auto, got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        reason = "no answer" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise ConnectionError(f"execution.ray_address: no Ray cluster at {address} ({reason} "
                              f"within execution.ray_connect_timeout = {timeout:g} s)") from None


def join_cluster(ray: Any, address: str) -> None:
    """``ray.init(address)``; Ray's own refusal (``auto`` with no cluster running) named ours.

    Ray's message went on to point at its own ``--address`` flag, not the setting: only its
    first sentence is kept.
    """
    try:
        ray.init(address=address, **quiet_ray())
    except ConnectionError as err:
        said = str(err).partition(". ")[0].rstrip(".")
        raise ConnectionError(f"execution.ray_address: no Ray cluster to join at {address!r} "
                              f"({said}; start one with `ray start --head`)") from None


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
    """``settings.workers``, or as many as the nodes place (at most :data:`MOST_WORKERS`).

    A count they cannot place is refused, and so is a resource finer than Ray's unit (Ray
    refuses it too, in a traceback; here it divided by zero). Each worker is a process: left
    uncapped, ``num_cpus = 0.00015`` on 2 cores asked Ray for 10 000 and never reached a round.
    """
    for key in ("num_cpus", "num_gpus"):
        value = getattr(settings, key)
        if 0 < value < 1 / UNIT:
            raise ConfigError(f"execution.{key}: Ray counts resources in steps of {1 / UNIT:g}, "
                              f"got {value:g}")
    fits = placeable(nodes, settings.num_cpus, settings.num_gpus)
    if fits and (settings.workers or 0) <= fits:
        return settings.workers or min(fits, MOST_WORKERS)
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
