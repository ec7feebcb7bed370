"""The SDK client an app embeds: enroll once, then poll, download, train, upload.

    client = FederatedClient("https://fl.example.org", state_dir, data, token=enrollment_token)
    while True:                      # the app's own loop: one call per round
        step = client.step()
        if step.status in ("finished", "stopped"):
            break
        time.sleep(step.retry_after)

Everything the device keeps lives in ``state_dir`` and survives restarts:

    credentials.json            server URL, client id, secret (mode 0600)
    cache.json                  global state's hash, client state's run (id, config digest)
    global.safetensors          the newest downloaded global state (sdk/global_states.py)
    client_state.safetensors    the algorithm's private state (DeviceStateStore)
    pending.safetensors         a trained round the server has not answered: upload bytes, the
                                client state it made, the global and config it was trained on

A round is committed on the device only when the server has answered the upload, so an app
killed at any point re-sends the same bytes (an idempotent retry) instead of training twice;
one the server's history no longer holds (restored from a backup) is dropped with a warning.
Retries, refusals and the bounds on the server's answers are sdk/transport.py's; a task the
device cannot act on is a one-line ValueError (``protocol.task_problem``), as is a global state
of another model or not finite, and a stored state of the run's id under another config. A
fit that diverges is not uploaded and leaves the state as it was (``diverged``). The client imports
nothing from ``pflkit.server``. A task's ``package.module:attr`` names are imported only if
``allow_imports`` allows them: the server chooses the names, the device's owner chooses what
code runs (sdk/registry.py).
``device`` ("cpu", "cuda", "auto") is where training and the post-federation stage run; the
local data moves there once, downloaded states once per round, uploads leave as safetensors.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from torch import nn

from pflkit.sdk import client_data, pending_round, protocol, tensorio, transport
from pflkit.sdk.aggregation_rules import clip_update
from pflkit.sdk.algorithms.base import Algorithm, Choice, ClientState, State
from pflkit.sdk.client_data import DATA_FILE, data_problem, load_client_data, save_client_data
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.device import data_to, resolve_device, state_to, use_device
from pflkit.sdk.device_files import CACHE, DeviceFiles
from pflkit.sdk.divergence import diverged, finite_state
from pflkit.sdk.global_states import GlobalStates
from pflkit.sdk.pending_round import PendingRound
from pflkit.sdk.registry import ImportPolicy
from pflkit.sdk.secagg.wire import TASK_KEY
from pflkit.sdk.secagg_device import change_vector, take_part
from pflkit.sdk.seeding import numpy_rng
from pflkit.sdk.state_store import DeviceStateStore, config_digest
from pflkit.sdk.task_config import TaskConfig
from pflkit.sdk.tensorio import atomic_write_bytes, state_from_bytes
from pflkit.sdk.training import autocast_training
from pflkit.sdk.transport import RetryPolicy, ServerRefused, ServerUnavailable

log = logging.getLogger(__name__)

__all__ = ["DATA_FILE", "FederatedClient", "RetryPolicy", "ServerRefused", "ServerUnavailable",
           "StepResult", "load_client_data", "save_client_data"]


@dataclass
class StepResult:
    """What one :meth:`FederatedClient.step` did."""

    status: str  # trained, uploaded, wait, paused, stopped, finished, late, diverged
    retry_after: float  # seconds until polling again is useful: in [0, protocol.MAX_WAIT]
    round: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)


class FederatedClient:
    """One device's participation in a federated run over HTTP."""

    def __init__(self, server: str, state_dir: Path, data: LabeledTensors, *,
                 token: str | None = None, retry: RetryPolicy | None = None,
                 timeout: float = 120.0, device: str = "cpu", precision: str = "fp32",
                 allow_imports: Sequence[str] = (), answer_deadline: float | None = None,
                 max_download_bytes: int = transport.MAX_DOWNLOAD) -> None:
        self.server = server.rstrip("/")
        try:
            self.imports = ImportPolicy.allowing(allow_imports, "the device's allow_imports "
                                                 "(FederatedClient(allow_imports=...), "
                                                 "pfl-client --allow-imports)")
        except ValueError as err:
            raise ValueError(f"allow_imports: {err}") from None
        self.state_dir = Path(state_dir)
        self.connection = transport.ServerConnection(  # its limits are checked first
            self.server, retry or RetryPolicy(), timeout, numpy_rng(0, "retry-jitter", str(
                self.state_dir.resolve())), max_download_bytes, answer_deadline)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.device = resolve_device(device)
        self.autocast = use_device(self.device, precision)
        if (problem := data_problem(data.x, data.y)) is not None:  # pfl-sim refuses them too
            raise ValueError(f"data: {problem}")
        self.data = data_to(data, self.device)
        self.store = DeviceStateStore(self.state_dir)
        self.files = DeviceFiles(self.state_dir)
        self.globals = GlobalStates(self.state_dir, self.files, lambda digest: self._request(
            "GET", f"/v1/globals/{digest}", max_bytes=self.connection.max_download).content)
        self._built: tuple[str, Algorithm, dict] | None = None  # task key, algorithm, layout
        self._credentials = self.files.read_credentials()
        if (enrolled := self._credentials.get("server")) not in (None, self.server):
            raise ValueError(f"{self.state_dir} is enrolled with {transport.shown_url(enrolled)}"
                             f", not {self.server}")  # printed: no user name or password
        if not self._credentials and token is not None:
            self.enroll(token)

    @property
    def client_id(self) -> int:
        """The id the server gave this device at enrollment."""
        if not self._credentials:
            raise RuntimeError("not enrolled: pass an enrollment token")
        return int(self._credentials["client_id"])

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.connection.request(method, path, secret=self._credentials["secret"], **kwargs)

    def enroll(self, token: str) -> int:
        """Trade an enrollment token for credentials (stored with mode 0600); returns the id.

        The current run's task is checked first (its algorithm and model built as for a round,
        the data's input shape compared): a device that cannot train it raises here with its
        token unspent, instead of being sampled and leaving the round to its deadline.
        """
        answer = self.connection.request("GET", "/v1/task/preview", secret=token)
        preview = transport.json_answer(answer, "task preview", protocol.preview_problem)
        if (config := preview.get("config")) is not None:
            self._algorithm(preview["run_id"], TaskConfig.from_wire(config, self.imports))
        answer = self.connection.request("POST", "/v1/clients/enroll", private=token,
                                         json={"token": token})
        self._credentials = self.files.write_credentials(
            self.server, transport.json_answer(answer, "enrollment"))
        return self.client_id

    def global_state(self, digest: str) -> State:
        """Return the global state with this hash: cached, else downloaded and verified."""
        return self.globals.get(digest)

    def _run_global(self, digest: str) -> State:
        """The global state ``digest``, refused in one line unless the built model's, finite."""
        return self.globals.of_model(digest, self._built[2])  # type: ignore[index]

    def _algorithm(self, run_id: int, config: TaskConfig) -> Algorithm:
        key = json.dumps([run_id, config.to_wire()])  # all it is built from; one kept at a time
        if self._built is None or self._built[0] != key:
            if problem := client_data.task_problem(self.data, config.input_shape,
                                                   config.num_classes):
                raise ValueError(problem)
            self._built = (key, built := config.build().to(self.device), {  # globals' layout
                k: tuple(v.shape) for k, v in built.aggregation.init_global(config.seed).items()})
        return self._built[1]

    def _client_state(self, run_id: int, config: str, algorithm: Algorithm, seed: int
                      ) -> ClientState:
        """The stored private state of this run (a new run starts from ``init_client``).

        One of the same run id under another config (``config``: its digest) is refused, kept.
        """
        stored, cache = self.store.load(), self.files.read_json(CACHE)
        if stored is None or cache.get("state_run") != run_id:
            return algorithm.training.init_client(self.client_id, seed, self.data)
        if cache.get("state_config") not in (None, config):  # None: from an older release
            raise ValueError(self.store.refused(run_id))
        return ClientState(state_to(stored.tensors, self.device), stored.meta)

    def _train(self, task: dict[str, Any]) -> PendingRound | None:
        """Fit one round, persisted as the pending file (None: it diverged, now or before)."""
        cache = self.files.read_json(CACHE)
        this_round = [task["run_id"], task["round"], task["global_hash"]]
        if cache.get("diverged") == this_round:
            return None
        cfg, digest = TaskConfig.from_wire(task["config"], self.imports), config_digest(
            task["config"])
        clip = protocol.task_clip_norm(task)
        algorithm = self._algorithm(task["run_id"], cfg)
        ctx = cfg.context(task["round"], self.client_id)
        global_state = state_to(self._run_global(task["global_hash"]), self.device)
        state = self._client_state(task["run_id"], digest, algorithm, cfg.seed)
        with autocast_training(self.autocast), algorithm.training.seeded(ctx):
            result = algorithm.training.fit(global_state, state, self.data, ctx)
        if diverged(result):  # the server would refuse it (sdk/divergence.py)
            log.warning("round %s: local training diverged (NaN or Inf weights or loss): "
                        "nothing is uploaded and the device keeps its state", task["round"])
            self.files.write_json(CACHE, {**cache, "diverged": this_round})
            return None
        update = result.update if clip is None else clip_update(global_state, result.update, clip)
        metrics = {k: float(v) for k, v in result.metrics.items() if math.isfinite(v)}
        upload = tensorio.state_to_bytes(update, protocol.round_report(  # or one line: not kept
            task["round"], result.num_samples, metrics))
        pending = PendingRound(task["run_id"], task["round"], int(result.num_samples), metrics,
                               upload, result.client_state, task["global_hash"], digest)
        atomic_write_bytes(self.state_dir / pending_round.FILE, pending.to_bytes())
        return pending

    def _commit(self, pending: PendingRound) -> None:
        """Make the round's client state the device's state (the server has answered)."""
        self.store.save(pending.client_state)
        self.files.write_json(CACHE, {**self.files.read_json(CACHE), "state_run": pending.run_id,
                                      "state_config": pending.config})
        (self.state_dir / pending_round.FILE).unlink(missing_ok=True)

    def step(self) -> StepResult:
        """Poll once; if this device is sampled, train and upload (one call per round)."""
        task = transport.json_answer(self._request("GET", "/v1/task"), "task",
                                     protocol.task_problem)
        pending = pending_round.still_due(self.state_dir / pending_round.FILE, task,
                                          self._commit)  # counted or late: keeps its state
        retry = float(task["retry_after"])
        if task["status"] == "finished" and task.get("config"):
            self._finish(task)
        if task["status"] != "train":
            return StepResult(task["status"], retry, task.get("round"))
        if pending is None and (pending := self._train(task)) is None:
            return StepResult("diverged", retry, task["round"])
        status = "trained"
        try:
            if task.get(TASK_KEY) is not None:  # SecAgg: the update leaves masked (privacy.md)
                if not take_part(self._request, self.client_id, task, change_vector(
                        state_from_bytes(pending.upload), self.global_state(task["global_hash"])),
                        self.files):
                    return StepResult("wait", retry, pending.round)  # it never masks twice
            else:
                self._request("PUT", f"/v1/runs/{pending.run_id}/rounds/{pending.round}/update",
                              params={"num_samples": pending.weight(task)},
                              content=pending.upload,
                              headers={"Content-Type": "application/octet-stream"})
        except ServerRefused as err:
            if err.status == 409:  # e.g. paused meanwhile: keep the pending round, poll again
                log.warning("round %s: upload deferred: %s", pending.round, err.detail)
                return StepResult("wait", retry, pending.round)
            if err.status != 410:
                raise
            status = "late"
            log.warning("round %s closed before the upload: %s", pending.round, err.detail)
        self._commit(pending)
        return StepResult(status, retry, pending.round, pending.metrics)

    def _finish(self, task: dict[str, Any]) -> None:
        """Keep the final config and run the post-federation stage, if any (once per run)."""
        cache = self.files.read_json(CACHE)
        if (cache.get("finished_run"), cache.get("config")) == (task["run_id"], task["config"]):
            return
        cfg, digest = TaskConfig.from_wire(task["config"], self.imports), config_digest(
            task["config"])
        algorithm = self._algorithm(task["run_id"], cfg)
        global_state = state_to(self._run_global(task["global_hash"]), self.device)
        # refused if of another config; a run it never trained in starts from init_client
        after = state = self._client_state(task["run_id"], digest, algorithm, cfg.seed)
        if algorithm.personalization.has_stage:
            ctx = cfg.context(cfg.total_rounds, self.client_id)
            with autocast_training(self.autocast), algorithm.training.seeded(ctx):
                after = algorithm.personalization.personalize(global_state, state, self.data, ctx)
            if not finite_state(after.tensors):  # as pfl-sim does: the state before it stays
                log.warning("the post-federation stage diverged (NaN or Inf weights): the "
                            "device keeps its state from before the stage")
                after = state
        self.store.save(after)  # the state personalized_model uses is this run's
        self.files.write_json(CACHE, {**self.files.read_json(CACHE), "state_run": task["run_id"],
                                      "state_config": digest, "finished_run": task["run_id"],
                                      "config": task["config"]})

    def personalized_model(self, choice: Choice | None = None) -> nn.Module:
        """Build the device's inference model from the finished run, on the client's device."""
        cache = self.files.read_json(CACHE)
        if "finished_run" not in cache:
            raise RuntimeError("no finished run yet: keep calling step()")
        config = TaskConfig.from_wire(cache["config"], self.imports)
        algorithm = self._algorithm(cache["finished_run"], config)
        return algorithm.inference.personalized_model(
            self._run_global(cache["global_hash"]), self.store.load() or ClientState(), choice)

    def run(self, max_rounds: int | None = None) -> int:
        """Loop :meth:`step` until the run ends (or ``max_rounds`` trained); return rounds."""
        trained = 0
        while max_rounds is None or trained < max_rounds:
            step = self.step()
            if step.status in ("finished", "stopped"):
                break
            if step.status in ("trained", "late"):
                trained += 1
                continue
            time.sleep(step.retry_after)
        return trained

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self.connection.close()
