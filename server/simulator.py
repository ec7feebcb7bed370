"""The simulator: many virtual clients, in process, driving the same Coordinator as the server.

The run directory's layout is :class:`~pflkit.sdk.rundir.RunDir`'s.

Commit order per round: client versions, metrics row, then ``global/latest`` (atomic rename).
``--resume`` trusts only rounds up to the one in ``global/latest``; later files are ignored.
All randomness is derived from (seed, round, client), so a resumed run ends bit-identical to an
uninterrupted one. Client fits and post-federation stages run through an executor
(:mod:`pflkit.server.executors`: sequential, Ray, ...) on the configured device; results are
folded in client-id order whatever order they finish in.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pflkit.sdk.aggregation_rules import AggregatorFactory, clip_update, refuse_unfit_rules
from pflkit.sdk.algorithms.base import ClientState, RoundContext, State
from pflkit.sdk.builder import build_algorithm, load_data, partition_of
from pflkit.sdk.data.federation import ClientData, Partition, partition_table, plot_partition
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.device import federation_to
from pflkit.sdk.divergence import defined_loss, diverged
from pflkit.sdk.phases import phase
from pflkit.sdk.privacy_accounting import privacy_spent
from pflkit.sdk.run_config import ExecutionConfig, SimConfig
from pflkit.sdk.rundir import RunDir, check_creatable, checkpoint_round
from pflkit.sdk.state_store import client_state_to_bytes
from pflkit.sdk.tensorio import atomic_write_bytes, load_state, save_json, save_state
from pflkit.server.coordinator import Coordinator, OpenRound
from pflkit.server.executors import ClientTask, make_executor
from pflkit.server.sim_divergence import stage_result, submit_finite_rows, warn, what_next
from pflkit.server.sim_evaluation import final_scores, round_scores

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunResult:
    """What a finished run produced."""

    run_dir: Path
    global_state: State
    final: dict[str, Any]


class Simulation:
    """One run: builds everything from the config, then trains round by round."""

    def __init__(self, config: SimConfig, run_dir: Path, *, resume: bool = False,
                 progress: bool = True) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        # a fresh run that fails removes what it wrote, down to the folder that existed before
        self._existing = None if resume else check_creatable(self.run_dir)
        self.files = RunDir(self.run_dir)
        self.progress = progress
        if not resume:
            self.files.refuse_fresh_run()
        device = config.execution.torch_device()  # fail before loading any data
        dataset = load_data(config)
        self.algorithm = build_algorithm(config, dataset.spec)
        partition = partition_of(config, dataset)
        self.federation = federation_to(partition.federation(dataset), device)
        self.on_device = self._on_device_engine()
        self.store = self.files.clients
        start_round, global_state = 0, None
        if resume and (done := self.files.rounds_done()):
            start_round, global_state = done, load_state(self.files.latest)
        global_state = global_state or self.algorithm.aggregation.init_global(config.seed)
        refuse_unfit_rules(config.aggregation, self.algorithm.aggregation, global_state,
                           config.schedule(), len(self.federation.clients))
        # DP's clip norm is state of the run: a resumed run continues with the stored one
        hidden = config.aggregation.hidden_seed(config.seed)  # the sample's and noise's seed
        self.rules = AggregatorFactory(self.algorithm.aggregation.new_aggregator,
                                       config.aggregation, Path(tempfile.gettempdir()),
                                       config.schedule(), hidden,
                                       self.files.clip_norm() if start_round else None)
        self.coordinator = Coordinator(self.algorithm, config.schedule(),
                                       list(self.federation.clients), global_state, hidden,
                                       start_round, aggregator_factory=self.rules)
        # built before any write: a Ray cluster that cannot be joined leaves the folder as it was
        self.executor = make_executor(config.execution, self.federation, self.algorithm)
        # everything is built: only now does the run directory change
        try:
            if resume:
                self.files.refuse_another_deal(partition)  # the data may have changed since
                if self.files.config() != config:  # continued on another executor or device
                    self.files.config_file.write_text(config.to_toml())
                self.store.prune(start_round - 1)
                self.files.truncate_metrics(start_round)
            else:
                self._start_fresh(partition)
        except BaseException:
            self.close()
            if not resume:  # before its first round: the same --out must work again
                self.files.discard(self._existing)
            raise
        self._states: dict[int, ClientState] = {}
        self._stage_diverged: list[int] = []  # clients whose post-federation stage diverged

    def close(self) -> None:
        """Release the executor's workers (a Ray cluster started for this run stops)."""
        self.executor.close()

    def _on_device_engine(self) -> Callable[[State, ClientState, LabeledTensors, RoundContext],
                                            ClientState] | None:
        """The post-federation stage's ExecuTorch engine (docs/on-device.md); None: eager."""
        if self.config.execution.personalize_on == "eager":
            return None
        from pflkit.export.on_device import OnDevicePersonalizer  # lowering needs the exporter

        engine = OnDevicePersonalizer(self.algorithm, self.federation.spec.input_shape)
        cid, client = next(iter(self.federation.all_clients.items()))
        state = self.algorithm.aggregation.init_global(self.config.seed)
        start = self.algorithm.training.init_client(cid, self.config.seed, client.train)
        engine.part(state, start, client.train, self.context(cid, self.config.rounds))
        return engine

    # -- run directory ----------------------------------------------------------------------------
    @classmethod
    def resume(cls, run_dir: Path, progress: bool = True,
               execution: ExecutionConfig | None = None) -> Simulation:
        """Continue a stopped run as it ran (RunDir.resumed_config); ``execution``: where now."""
        config = RunDir(run_dir).resumed_config()
        if execution is not None:
            config = config.replace(execution=execution)  # written back once it is built
        return cls(config, run_dir, resume=True, progress=progress)

    def _start_fresh(self, partition: Partition) -> None:
        files = self.files
        files.plots.mkdir(parents=True, exist_ok=True)
        files.config_file.write_text(self.config.to_toml())
        files.save_partition(partition)
        files.partition_table.write_text(partition_table(self.federation, 200) + "\n")
        plot_partition(self.federation, files.plots / "partition.png")

    @phase("commit")
    def _commit(self, round_index: int, global_state: State, saved: list[int]) -> None:
        done = round_index + 1
        meta = self.files.commit_metadata(done, self.config, self.rules.clip.value
                                          if self.rules.clip is not None else None)
        if done % self.config.checkpoint_interval == 0 or done == self.config.rounds:
            save_state(self.files.checkpoint(done), global_state, meta)
        save_state(self.files.latest, global_state, meta)
        self.store.prune(round_index, saved)

    # -- clients ----------------------------------------------------------------------------------
    def client_state(self, client_id: int) -> ClientState:
        """The client's current private state (from memory, disk, or a fresh init)."""
        if client_id not in self._states:
            stored = self.store.load(client_id, self.coordinator.round - 1)
            self._states[client_id] = stored if stored is not None else \
                self.algorithm.training.init_client(client_id, self.config.seed,
                                                    self.federation.all_clients[client_id].train)
        return self._states[client_id]

    def context(self, client_id: int, round_index: int) -> RoundContext:
        """The round context a client trains under."""
        return RoundContext(round_index, self.config.rounds,
                            self.config.schedule().lr_at(round_index), self.config.seed,
                            client_id)

    # -- the loop ---------------------------------------------------------------------------------
    def run_round(self) -> dict[str, Any]:
        """Train the sampled clients, aggregate, evaluate if due, commit. Returns the row."""
        coord = self.coordinator
        current: OpenRound = coord.open_round()
        clip = self.rules.clip.value if self.rules.clip is not None else None  # this round's
        started = time.perf_counter()
        losses, weights, saved = 0.0, 0, []
        with phase("tasks"):
            tasks = [ClientTask(cid, self.client_state(cid), self.federation.clients[cid].train,
                                self.context(cid, current.index)) for cid in current.sampled]
        device_clips = clip is not None and self.config.aggregation.dp_clip_on_device
        batch = self.executor.fit_stacked(coord.global_state, tasks)
        stacked = batch.updates is not None and not device_clips  # each check once per stack
        dropped = submit_finite_rows(coord, current.sampled, batch) if stacked else []
        diverged_ids: list[int] = []
        with phase("results"):  # streamed executors train here; per-client folds, states
            for k, (task, result) in enumerate(zip(tasks, batch.results, strict=True)):
                cid, before = task.client_id, task.state
                if k in dropped or (not stacked and diverged(result)):
                    diverged_ids.append(cid)
                    warn(current.index, cid)
                    continue
                if not stacked:  # clipped as a device would
                    coord.submit(cid, result.num_samples, result.update if not device_clips else
                                 clip_update(coord.global_state, result.update, clip))
                self._states[cid] = after = result.client_state
                if before.tensors or before.meta or after.tensors or after.meta:
                    self.store.save(cid, current.index, after)  # stateless methods write nothing
                    saved.append(cid)
                loss = defined_loss(result)  # None: no step taken (epochs = 0)
                if loss is not None:
                    losses += loss * result.num_samples
                    weights += result.num_samples
        global_state = coord.close_round()
        row: dict[str, Any] = {
            "round": current.index, "lr": self.config.schedule().lr_at(current.index),
            "clients": current.sampled, "train_loss": losses / weights if weights else None,
            "seconds": time.perf_counter() - started} | \
            ({"diverged": diverged_ids} if diverged_ids else {})
        done = current.index + 1
        row.update(privacy_spent(self.config.aggregation, self.config.schedule(),
                                 len(coord.client_ids), done, clip))
        if done % self.config.eval_interval == 0 or done == self.config.rounds:
            row.update(self.evaluate_round())
        # the wall time is returned, not written: a run directory depends only on config and seed
        self.files.append_metrics({k: v for k, v in row.items() if k != "seconds"})
        self._commit(current.index, global_state, saved)
        return row

    @phase("evaluate")
    def evaluate_round(self) -> dict[str, Any]:
        """Generic model on the global test set; personalized models on clients' own tests."""
        return round_scores(self.algorithm, self.coordinator.global_state, self.federation,
                            self.client_state)

    def run(self) -> RunResult:
        """Train the remaining rounds, then the final per-client evaluation and the report."""
        coord = self.coordinator
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[status]}"), TimeElapsedColumn())
        try:
            with Progress(*columns, disable=not self.progress, transient=False) as bar:
                task = bar.add_task(f"{self.config.algorithm.name} rounds",
                                    total=self.config.rounds, completed=coord.round, status="")
                while not coord.finished:
                    row = self.run_round()
                    status = f"loss {row['train_loss']:.3f}" if row["train_loss"] else ""
                    if "global_top1" in row:
                        status += f"  global acc {row['global_top1']:.3f}"
                    bar.update(task, advance=1, status=status)
            final = self.final_evaluation()
            save_json(self.files.final, final)
            from pflkit.server.report import write_report

            write_report(self.run_dir)
        except Exception as err:  # Ctrl-C is not one: a stopped run keeps its rounds for --resume
            self._discard(err)
            raise
        finally:
            self.close()
        return RunResult(self.run_dir, coord.global_state, final)

    def _discard(self, err: Exception) -> None:
        """A fresh run that failed leaves no folder that ``--out`` would refuse for nothing.

        Before its first committed round it is removed (down to the folder that existed). Once
        a round is committed its checkpoints are worth more than a free ``--out``: they stay,
        and ``--resume`` continues from them once the cause can be fixed (the log says so).
        """
        if self._existing is None:
            return
        if self.files.latest.exists():
            log.error("the run failed after round %d: its checkpoints stay in %s; %s",
                      checkpoint_round(self.files.latest), self.run_dir,
                      what_next(err, self.run_dir))
            return
        self.files.discard(self._existing)
        log.warning("the run failed: removed what it wrote to %s", self.run_dir)

    def final_evaluation(self) -> dict[str, Any]:
        """Personalize (if the method has a stage) and score every client, old and new."""
        out = final_scores(self.algorithm, self.coordinator.global_state, self.federation,
                           self._final_states, self.progress)
        out["rounds"] = self.coordinator.round
        return out | ({"diverged": self._stage_diverged} if self._stage_diverged else {})

    def _personalize_on_device(self, tasks: list[ClientTask]) -> Iterator[ClientState]:
        """Every task's stage on its training program, one client after another."""
        assert self.on_device is not None
        for task in tasks:
            yield self.on_device(self.coordinator.global_state, task.state, task.data,
                                 task.context)

    def _final_states(self, members: dict[int, ClientData]) -> Iterator[ClientState]:
        """Each member's state for the final evaluation, after the method's stage if any."""
        if not self.algorithm.personalization.has_stage:
            yield from (self.client_state(cid) for cid in members)
            return
        tasks = [ClientTask(cid, self.client_state(cid), client.train,
                            self.context(cid, self.config.rounds))
                 for cid, client in members.items()]
        stage = self.executor.personalize(self.coordinator.global_state, tasks) \
            if self.on_device is None else self._personalize_on_device(tasks)
        for task, after in zip(tasks, stage, strict=True):
            cstate = stage_result(task.client_id, task.state, after, self._stage_diverged)
            atomic_write_bytes(self.files.personalized(task.client_id),
                               client_state_to_bytes(cstate))
            yield cstate
