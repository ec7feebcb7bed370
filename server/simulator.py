"""The simulator: many virtual clients, in process, driving the same Coordinator as the server.

A run directory holds everything needed to inspect, resume or export the run:

    config.toml                 the SimConfig (the same TOML format as pfl-server)
    partition.txt, plots/       the partition (per-client class histogram) and report plots
    global/latest.safetensors   the newest committed global state (metadata: round) = commit point
    global/round_<r>.safetensors   checkpoints every checkpoint_interval rounds and the last
    clients/<id>.r<r>.safetensors  each client's private state, versioned by round
    metrics.jsonl               one JSON object per round (train) and per evaluation
    personalized/<id>.safetensors  client states after a post-federation stage (FT, PFL-MoE)
    final.json, report.md       per-client final evaluation and the human-readable report

Commit order per round: client versions, metrics row, then ``global/latest`` (atomic rename).
``--resume`` trusts only rounds up to the one in ``global/latest``; later files are ignored.
All randomness is derived from (seed, round, client), so a resumed run ends bit-identical to an
uninterrupted one. Client fits and post-federation stages run through an executor
(:mod:`pflkit.server.executors`: sequential, Ray, ...) on the configured device; results are
folded in client-id order whatever order they finish in.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pflkit.sdk.algorithms.base import (
    ClientState,
    RoundContext,
    State,
)
from pflkit.sdk.data.federation import ClientData, partition_table, plot_partition
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.device import federation_to, resolve_device
from pflkit.sdk.evaluation import ClientReport, evaluate_client, summarize
from pflkit.sdk.metrics import scores_from_logits
from pflkit.sdk.run_config import ExecutionConfig, SimConfig, build_run
from pflkit.sdk.scoring import ScoringCache
from pflkit.sdk.state_store import RunClientStore, client_state_to_bytes
from pflkit.sdk.tensorio import (
    atomic_write_bytes,
    load_state,
    read_metadata,
    save_json,
    save_state,
)
from pflkit.server.coordinator import Coordinator
from pflkit.server.executors import ClientTask, make_executor

log = logging.getLogger(__name__)

LATEST = "global/latest.safetensors"


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
        self.progress = progress
        device = resolve_device(config.execution.device)  # fail before loading any data
        federation, self.algorithm = build_run(config)
        self.federation = federation_to(federation, device)
        self.on_device = self._on_device_engine()
        self.store = RunClientStore(self.run_dir / "clients")
        start_round, global_state = 0, None
        if resume:
            start_round, global_state = self._committed()
            self.store.prune(start_round - 1)
            self._truncate_metrics(start_round)
        else:
            self._start_fresh()
        if global_state is None:
            global_state = self.algorithm.init_global(config.seed)
        self.coordinator = Coordinator(self.algorithm, config.schedule(),
                                       list(self.federation.clients), global_state, config.seed,
                                       start_round)
        self._states: dict[int, ClientState] = {}
        self.executor = make_executor(config.execution, self.federation, self.algorithm)

    def close(self) -> None:
        """Release the executor's workers (a Ray cluster started for this run stops)."""
        self.executor.close()

    def _on_device_engine(self) -> Callable[[State, ClientState, LabeledTensors, RoundContext],
                                            ClientState] | None:
        """The ExecuTorch engine of the post-federation stage, or None for eager PyTorch.

        ``[execution] personalize_on = "executorch"`` runs each client's stage on its training
        program (docs/on-device.md). A method without such a stage is refused here, before any
        round, with the reason.
        """
        if self.config.execution.personalize_on == "eager":
            return None
        from pflkit.export.on_device import OnDevicePersonalizer  # lowering needs the exporter

        engine = OnDevicePersonalizer(self.algorithm, self.federation.spec.input_shape)
        cid, client = next(iter(self.federation.all_clients.items()))
        state = self.algorithm.init_global(self.config.seed)
        engine.part(state, self.algorithm.init_client(cid, self.config.seed, client.train),
                    client.train, self.context(cid, self.config.rounds))
        return engine

    # -- run directory ----------------------------------------------------------------------------
    @classmethod
    def resume(cls, run_dir: Path, progress: bool = True,
               execution: ExecutionConfig | None = None) -> Simulation:
        """Continue a stopped run from its last committed round (optionally elsewhere).

        ``execution`` replaces the stored executor and device settings, e.g. to continue a
        run on a GPU or a cluster; it is written back to ``config.toml``.
        """
        config_path = Path(run_dir) / "config.toml"
        if not config_path.is_file():
            raise FileNotFoundError(f"{run_dir} is not a pfl-sim run directory (no config.toml)")
        config = SimConfig.load(config_path)
        if execution is not None and execution != config.execution:
            config = config.replace(execution=execution)
            config_path.write_text(config.to_toml())
        return cls(config, run_dir, resume=True, progress=progress)

    def _start_fresh(self) -> None:
        if (self.run_dir / LATEST).exists():
            raise FileExistsError(
                f"{self.run_dir} already holds a run; use --resume or another --out"
            )
        (self.run_dir / "plots").mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.toml").write_text(self.config.to_toml())
        (self.run_dir / "partition.txt").write_text(partition_table(self.federation, 200) + "\n")
        plot_partition(self.federation, self.run_dir / "plots" / "partition.png")

    def _committed(self) -> tuple[int, State | None]:
        path = self.run_dir / LATEST
        if not path.is_file():
            return 0, None
        rounds_done = int(read_metadata(path.read_bytes())["rounds_done"])
        return rounds_done, load_state(path)

    def _truncate_metrics(self, rounds_done: int) -> None:
        path = self.run_dir / "metrics.jsonl"
        if path.is_file():
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            kept = [r for r in rows if r["round"] < rounds_done]
            path.write_text("".join(json.dumps(r) + "\n" for r in kept))

    def _append_metrics(self, row: dict[str, Any]) -> None:
        with (self.run_dir / "metrics.jsonl").open("a") as handle:
            handle.write(json.dumps(row) + "\n")

    def _commit(self, round_index: int, global_state: State, saved: list[int]) -> None:
        meta = {"rounds_done": str(round_index + 1), "algorithm": self.config.algorithm}
        done = round_index + 1
        if done % self.config.checkpoint_interval == 0 or done == self.config.rounds:
            save_state(self.run_dir / "global" / f"round_{done}.safetensors", global_state, meta)
        save_state(self.run_dir / LATEST, global_state, meta)
        self.store.prune(round_index, saved)

    # -- clients ----------------------------------------------------------------------------------
    def client_state(self, client_id: int) -> ClientState:
        """The client's current private state (from memory, disk, or a fresh init)."""
        if client_id not in self._states:
            stored = self.store.load(client_id, self.coordinator.round - 1)
            self._states[client_id] = stored if stored is not None else \
                self.algorithm.init_client(client_id, self.config.seed,
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
        plan = coord.open_round()
        started = time.perf_counter()
        losses, weights = 0.0, 0
        saved = []
        tasks = [ClientTask(cid, self.client_state(cid), self.federation.clients[cid].train,
                            self.context(cid, plan.index)) for cid in plan.sampled]
        for task, result in zip(tasks, self.executor.fit(coord.global_state, tasks),
                                strict=True):
            cid, before = task.client_id, task.state
            coord.submit(cid, result.num_samples, result.update)
            self._states[cid] = after = result.client_state
            if before.tensors or before.meta or after.tensors or after.meta:
                self.store.save(cid, plan.index, after)  # stateless methods write nothing
                saved.append(cid)
            loss = result.metrics.get("train_loss", float("nan"))
            losses += loss * result.num_samples
            weights += result.num_samples
        global_state = coord.close_round()
        row: dict[str, Any] = {
            "round": plan.index, "lr": self.config.schedule().lr_at(plan.index),
            "clients": plan.sampled, "train_loss": losses / weights if weights else None,
            "seconds": time.perf_counter() - started,
        }
        done = plan.index + 1
        if done % self.config.eval_interval == 0 or done == self.config.rounds:
            row.update(self.evaluate_round())
        self._append_metrics(row)
        self._commit(plan.index, global_state, saved)
        return row

    def evaluate_round(self) -> dict[str, Any]:
        """Generic model on the global test set; personalized models on clients' own tests."""
        state = self.coordinator.global_state
        test = self.federation.test
        scoring = ScoringCache()
        generic = scores_from_logits(scoring.predict(self.algorithm.global_model(state), test),
                                     test.y)
        row: dict[str, Any] = {f"global_{k}": v for k, v in generic.to_dict().items()}
        if any(len(c.test) for c in self.federation.clients.values()):
            reports = [
                evaluate_client(self.algorithm.personalized_model(state, self.client_state(cid)),
                                client, None, self.federation.spec.num_classes, scoring.predict)
                for cid, client in self.federation.clients.items()
            ]
            summary = summarize(reports)
            row.update({f"personal_{k}": summary[f"own_{k}_mean"] for k in ("top1", "ece")})
            row["personal_top1_std"] = summary["own_top1_std"]
        return row

    def run(self) -> RunResult:
        """Train the remaining rounds, then the final per-client evaluation and the report."""
        coord = self.coordinator
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[status]}"), TimeElapsedColumn())
        try:
            with Progress(*columns, disable=not self.progress, transient=False) as bar:
                task = bar.add_task(f"{self.config.algorithm} rounds", total=self.config.rounds,
                                    completed=coord.round, status="")
                while not coord.finished:
                    row = self.run_round()
                    status = f"loss {row['train_loss']:.3f}" if row["train_loss"] else ""
                    if "global_top1" in row:
                        status += f"  global acc {row['global_top1']:.3f}"
                    bar.update(task, advance=1, status=status)
            final = self.final_evaluation()
        finally:
            self.close()
        save_json(self.run_dir / "final.json", final)
        from pflkit.server.report import write_report

        write_report(self.run_dir)
        return RunResult(self.run_dir, coord.global_state, final)

    def final_evaluation(self) -> dict[str, Any]:
        """Personalize (if the method has a stage) and score every client, old and new.

        Each distinct model is scored once and a body shared by several clients' models runs
        once per data set (:class:`ScoringCache`): the numbers equal scoring every model alone.
        """
        state = self.coordinator.global_state
        spec = self.federation.spec
        scoring = ScoringCache()
        out: dict[str, Any] = {}
        groups = {"clients": self.federation.clients, "new_clients": self.federation.new_clients}
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      disable=not self.progress) as bar:
            for group, members in groups.items():
                if not members:
                    continue
                task = bar.add_task(f"evaluating {group}", total=len(members))
                reports: dict[str, list[ClientReport]] = {}
                for client, cstate in zip(members.values(), self._final_states(members),
                                          strict=True):
                    for label, choice in self.algorithm.evaluation_choices(cstate).items():
                        model = self.algorithm.personalized_model(state, cstate, choice)
                        reports.setdefault(label, []).append(
                            evaluate_client(model, client, self.federation.test,
                                            spec.num_classes, scoring.predict))
                    bar.advance(task)
                headline = next(iter(reports))
                out[group] = {"summary": summarize(reports[headline]),
                              "per_client": [r.to_dict() for r in reports[headline]]}
                if len(reports) > 1:
                    out[group]["by_choice"] = {k: summarize(v) for k, v in reports.items()}
        test = self.federation.test
        generic = scores_from_logits(scoring.predict(self.algorithm.global_model(state), test),
                                     test.y)
        out["global_model"] = generic.to_dict()
        out["rounds"] = self.coordinator.round
        return out

    def _personalize_on_device(self, tasks: list[ClientTask]) -> Iterator[ClientState]:
        """Every task's stage on its training program, one client after another."""
        assert self.on_device is not None
        for task in tasks:
            yield self.on_device(self.coordinator.global_state, task.state, task.data,
                                 task.context)

    def _final_states(self, members: dict[int, ClientData]) -> Iterator[ClientState]:
        """Each member's state for the final evaluation, after the method's stage if any."""
        if not self.algorithm.has_personalization_stage:
            yield from (self.client_state(cid) for cid in members)
            return
        tasks = [ClientTask(cid, self.client_state(cid), client.train,
                            self.context(cid, self.config.rounds))
                 for cid, client in members.items()]
        stage = self.executor.personalize(self.coordinator.global_state, tasks) \
            if self.on_device is None else self._personalize_on_device(tasks)
        for task, cstate in zip(tasks, stage, strict=True):
            atomic_write_bytes(self.run_dir / "personalized" / f"{task.client_id}.safetensors",
                               client_state_to_bytes(cstate))
            yield cstate
