"""The Ray executor: client fits as calls on a pool of Ray actors, on one machine or a cluster.

Ray (``pip install 'pflkit[ray]'``) is the engine Flower's simulation uses. Here each actor is
a worker process holding the algorithm and every client's training rows: the rows go into
Ray's object store once per run and each worker reads them once, so a round only ships the
global state (once per round, as safetensors bytes) and each client's private state. Results
come back as safetensors bytes and are yielded in client-id order whatever order the workers
finish in: with one torch thread per worker a run is bit-identical to the sequential one.

A worker that dies mid-round (a killed process, a lost node) is restarted by Ray and the
clients it held are sent again; their fits are deterministic, so the round's result is the
same. A dead worker gets no client until it answers again: calls to a restarting actor fail
at once (``ActorUnavailableError``), and on a loaded machine a restart outlasted every retry.
Ray serializes the algorithm object and the data between our own processes with its own
object store; nothing from outside the run is unpickled.

Joining a cluster (``ray_address``) and the count of workers its nodes can place are checked
before any worker is asked for and before the simulator writes anything
(:mod:`pflkit.server.ray_cluster`): either would otherwise wait forever.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from pflkit.sdk.algorithms.base import Algorithm, ClientState, FitResult, RoundContext, State
from pflkit.sdk.config_types import ConfigError
from pflkit.sdk.data.federation import Federation
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.device import data_to, metrics_to_host, resolve_device, state_to, use_device
from pflkit.sdk.heap import keep_freed_heap
from pflkit.sdk.run_config import ExecutionConfig
from pflkit.sdk.state_store import client_state_from_bytes, client_state_to_bytes
from pflkit.sdk.tensorio import state_from_bytes, state_to_bytes
from pflkit.sdk.training import autocast_training
from pflkit.server.executors import ClientTask, Executor
from pflkit.server.faults import crash_point, slow_point
from pflkit.server.ray_cluster import (
    check_reachable,
    ctrl_c_kills,
    join_cluster,
    quiet_ray,
    worker_count,
)

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 4  # a client is sent at most this many times before the round fails
RESTART_TIMEOUT = 600.0  # seconds a dead worker may take to come back before the round fails


class ClientFitFailed(RuntimeError):
    """A client's fit kept failing on the Ray workers (its error, or workers dying)."""


def _import_ray() -> Any:
    """Ray, or one line naming the setting that asked for it (it is an optional dependency)."""
    try:
        import ray
    except ImportError as err:
        raise ConfigError(f"execution.executor: the ray executor needs Ray, which does not "
                          f"import ({err}): pip install 'pflkit[ray]'") from None
    return ray


def largest_first(tasks: Sequence[ClientTask]) -> list[int]:
    """Task indices, most training rows first (ties in task order).

    A fit's time grows with its rows, and a Dir(0.3) round's clients differ up to ~10x: handed
    out in client-id order, a large client drawn last runs alone while the other workers idle
    (bench-scale (a), 2 workers, rounds 0-3: 1.4-9.6% over an even split in steps,
    largest-first under 0.5%).
    Results are still folded in task order, so the run is unchanged.
    """
    return sorted(range(len(tasks)), key=lambda i: -len(tasks[i].data))


def find_modules_where(module_paths: Sequence[str]) -> None:
    """Append the driver's ``sys.path`` entries this worker lacks (it keeps its own first).

    A project's ``model:Net`` resolves from the folder of its config (``add_project_path``),
    which Ray's workers did not have: the starter project failed every fit with
    ``No module named 'model'`` after its run folder was written.
    """
    sys.path.extend(p for p in dict.fromkeys(module_paths) if p not in sys.path)


class ClientWorker:
    """One worker process: the algorithm, all clients' rows, and the round's global state."""

    def __init__(self, algorithm: Algorithm | list[Any],
                 rows: dict[int, tuple[np.ndarray, np.ndarray]], device: str, threads: int,
                 precision: str, tf32: bool, autotune: bool,
                 module_paths: Sequence[str] = ()) -> None:
        slow_point("ray_worker_start")
        keep_freed_heap()  # else every step faults its activations in again (19-27% more CPU)
        torch.set_num_threads(threads)
        self.device = resolve_device(device)  # "auto" is resolved where the worker runs
        find_modules_where(module_paths)
        if isinstance(algorithm, list):  # [its ref]: Ray leaves a nested ref alone, so a
            algorithm = _import_ray().get(algorithm[0])  # project's own method unpickles here
        self.algorithm = algorithm.to(self.device)
        self.autocast = use_device(self.device, precision, tf32, autotune)
        with warnings.catch_warnings():  # the object store's arrays are read-only: training
            warnings.simplefilter("ignore", UserWarning)  # only reads rows, so no copy is made
            self.data = {cid: data_to(LabeledTensors(torch.from_numpy(x), torch.from_numpy(y)),
                                      self.device) for cid, (x, y) in rows.items()}
        self._global: tuple[int, State] | None = None

    def pid(self) -> int:
        """The worker's process id (tests kill workers)."""
        return os.getpid()

    def _global_state(self, key: int, payload: bytes) -> State:
        """Decode the round's global state once per worker and round."""
        if self._global is None or self._global[0] != key:
            self._global = key, state_to(state_from_bytes(payload, "global state"), self.device)
        return self._global[1]

    def _client_state(self, payload: bytes) -> ClientState:
        state = client_state_from_bytes(payload)
        return ClientState(state_to(state.tensors, self.device), state.meta)

    def fit(self, key: int, global_payload: bytes, client_id: int, state: bytes,
            ctx: RoundContext) -> tuple[bytes, bytes, int, dict[str, float]]:
        """One client's round: (update, new client state, samples, metrics)."""
        crash_point("ray_worker_fit")
        global_state = self._global_state(key, global_payload)
        with autocast_training(self.autocast), self.algorithm.training.seeded(ctx):
            result = self.algorithm.training.fit(global_state, self._client_state(state),
                                                 self.data[client_id], ctx)
        return (state_to_bytes(result.update), client_state_to_bytes(result.client_state),
                result.num_samples, metrics_to_host([result.metrics])[0])

    def personalize(self, key: int, global_payload: bytes, client_id: int, state: bytes,
                    ctx: RoundContext) -> bytes:
        """One client's post-federation stage: its new state."""
        global_state = self._global_state(key, global_payload)
        with autocast_training(self.autocast), self.algorithm.training.seeded(ctx):
            new = self.algorithm.personalization.personalize(
                global_state, self._client_state(state), self.data[client_id], ctx)
        return client_state_to_bytes(new)


class RayExecutor(Executor):
    """Client fits on Ray actors; local Ray on this machine's cores unless ``ray_address``."""

    def __init__(self, settings: ExecutionConfig, federation: Federation,
                 algorithm: Algorithm) -> None:
        super().__init__(settings, federation, algorithm)
        ray = self._ray = _import_ray()
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            if settings.ray_address:
                check_reachable(settings.ray_address, settings.ray_connect_timeout)
                with ctrl_c_kills():  # nothing is written yet: nothing to clean up
                    join_cluster(ray, settings.ray_address)
            else:
                ray.init(num_cpus=os.cpu_count(), include_dashboard=False, **quiet_ray())
        try:  # a worker no node can place would hold its clients forever
            count = worker_count(ray.nodes(), settings)
        except ConfigError:
            if self._owns_ray:
                ray.shutdown()
            raise
        if settings.workers is None:  # a worker with no client to fit would only hold memory
            count = min(count, len(federation.all_clients))
        rows = {cid: (c.train.x.cpu().numpy(), c.train.y.cpu().numpy())
                for cid, c in federation.all_clients.items()}
        self._rows = ray.put(rows)  # shipped to each worker once, not every round
        # PFLKIT_* variables (thread counts, the kill tests' crash points) reach the workers
        env = {k: v for k, v in os.environ.items() if k.startswith("PFLKIT_")}
        self._actor = ray.remote(num_cpus=settings.num_cpus, num_gpus=settings.num_gpus,
                                 max_restarts=-1, max_task_retries=0,
                                 runtime_env={"env_vars": env} if env else None)(ClientWorker)
        threads = max(1, int(settings.num_cpus))
        # kept referenced for the run: a restarted worker is built from the same objects
        self._algorithm = ray.put(algorithm)
        self.workers = [self._actor.remote([self._algorithm], self._rows, settings.device,
                                           threads, settings.precision, settings.tf32,
                                           settings.cudnn_benchmark, list(sys.path))
                        for _ in range(count)]
        self._key = 0

    def pids(self) -> list[int]:
        """Process ids of the workers (for tests and monitoring)."""
        return self._ray.get([w.pid.remote() for w in self.workers])

    def _run(self, method: str, global_state: State, tasks: Sequence[ClientTask]
             ) -> Iterator[Any]:
        """Call ``method`` for every task on free workers; yield its results in task order."""
        ray = self._ray
        self._key += 1
        payload = ray.put(state_to_bytes(global_state))  # once per round, for every worker
        queue = largest_first(tasks)
        attempts = [0] * len(tasks)
        running: dict[Any, tuple[int, int]] = {}  # object ref -> (task index, worker index)
        restarting: dict[Any, tuple[int, float]] = {}  # probe ref -> (worker index, since)
        done: dict[int, Any] = {}
        idle = list(range(len(self.workers)))
        next_out = 0
        while next_out < len(tasks):
            while queue and idle:
                index, worker = queue.pop(0), idle.pop(0)
                task = tasks[index]
                attempts[index] += 1
                call = getattr(self.workers[worker], method)
                ref = call.remote(self._key, payload, task.client_id,
                                  client_state_to_bytes(task.state), task.context)
                running[ref] = index, worker
            if next_out in done:
                yield done.pop(next_out)
                next_out += 1
                continue
            (ref,), _ = ray.wait([*running, *restarting], num_returns=1)
            if ref in restarting:
                worker, since = restarting.pop(ref)
                if self._answered(ref, since):
                    idle.append(worker)
                else:
                    restarting[self._probe(worker)] = worker, since
                continue
            index, worker = running.pop(ref)
            try:
                done[index] = ray.get(ref)
            except ray.exceptions.RayActorError as err:
                client = tasks[index].client_id
                if attempts[index] >= MAX_ATTEMPTS:
                    raise ClientFitFailed(f"client {client}: its worker died "
                                          f"{attempts[index]} times ({err})") from err
                log.warning("worker died while fitting client %d; sending it again once a "
                            "worker is free", client)
                queue.insert(0, index)
                restarting[self._probe(worker)] = worker, time.monotonic()
            except ray.exceptions.RayTaskError as err:
                raise ClientFitFailed(f"client {tasks[index].client_id}: "
                                      f"{err.cause!r}") from err
            else:
                idle.append(worker)

    def _probe(self, worker: int) -> Any:
        """A call that answers once the (restarting) worker is up again."""
        return self.workers[worker].pid.options(max_task_retries=-1).remote()

    def _answered(self, probe: Any, since: float) -> bool:
        """Whether a restarting worker's probe answered (if not, back off a little)."""
        try:
            self._ray.get(probe)
        except self._ray.exceptions.RayActorError as err:
            waited = time.monotonic() - since
            if waited > RESTART_TIMEOUT:
                raise ClientFitFailed(f"a Ray worker did not come back within "
                                      f"{RESTART_TIMEOUT:.0f} s ({err})") from err
            time.sleep(min(1.0, 0.1 + waited / 10))
            return False
        return True

    def fit(self, global_state: State, tasks: Sequence[ClientTask]) -> Iterator[FitResult]:
        """Fit the tasks on the workers; results in task order, tensors on the CPU."""
        for update, state, samples, metrics in self._run("fit", global_state, tasks):
            yield FitResult(state_from_bytes(update, "update"), client_state_from_bytes(state),
                            samples, metrics)

    def personalize(self, global_state: State, tasks: Sequence[ClientTask]
                    ) -> Iterator[ClientState]:
        """The post-federation stage on the workers; states in task order."""
        for state in self._run("personalize", global_state, tasks):
            yield client_state_from_bytes(state)

    def close(self) -> None:
        """Stop the workers, and Ray itself if this executor started it."""
        for worker in self.workers:
            self._ray.kill(worker)
        self.workers = []
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()
