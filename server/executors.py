"""Executors: who runs a round's client fits (one by one here, batched, or on a Ray cluster).

The simulator hands an executor one :class:`ClientTask` per sampled client, in client-id order,
and folds the results into the Coordinator in that same order as they are yielded. Every
executor yields in task order whatever order its workers finish in, so the aggregate (a float64
running sum) and therefore the run never depend on timing. States cross the executor boundary
on the CPU: the global state comes in on the CPU and is moved to the device once per round, a
client's state once per fit (algorithms see every tensor on their device); updates, client
states and metrics go back to the CPU (aggregation and checkpoint boundaries), a round's at once
(:func:`results_to_cpu`).

Executors are named in the configuration (``[execution] executor = ...``) and built by
:func:`make_executor` from :data:`~pflkit.sdk.execution_config.EXECUTORS`, a table of
``module:attr`` paths imported on first use (Ray is an optional dependency); the config's
validation refuses a name not in it.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch

from pflkit.sdk.algorithms.base import Algorithm, ClientState, FitResult, RoundContext, State
from pflkit.sdk.data.federation import Federation
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.device import metrics_to_host, resolve_device, state_to, use_device
from pflkit.sdk.execution_config import EXECUTORS, ExecutionConfig
from pflkit.sdk.training import autocast_training
from pflkit.server.host_results import CPU, device_stacks, host_copies, rows, states_to_cpu


@dataclass(frozen=True)
class ClientTask:
    """One client's work in a round (or in the post-federation stage)."""

    client_id: int
    state: ClientState  # the client's private state before the round (CPU tensors)
    data: LabeledTensors  # its training rows, already on the executor's device
    context: RoundContext


@dataclass(frozen=True)
class FitBatch:
    """A round's fits in task order, and their updates as (K, ...) CPU stacks where stacked.

    An executor that trains a round as one program stacks them; the Coordinator then checks and
    folds each stack at once (:meth:`~pflkit.server.coordinator.Coordinator.submit_stacked`).
    """

    results: Iterable[FitResult]  # a list where ``updates`` is set, else possibly streamed
    # name -> (K, ...) stack, row k = result k's update; None: not stacked (a streaming
    # executor, or updates that differ in names or shapes: one of them is not the schema)
    updates: State | None = None
    # the same stacks on the GPU they were trained on (None on the CPU): an aggregator that
    # folds there skips 1000 clients' row-by-row float64 fold on the host (0.25 s, issue 22)
    device_updates: State | None = None

    def num_samples(self) -> list[int]:
        """Each result's sample count (stacked batches only: a stream is read once)."""
        if not isinstance(self.results, list):
            raise TypeError("a streamed batch is read once: count its samples as it goes")
        return [r.num_samples for r in self.results]


class Executor(ABC):
    """Runs client fits for the simulator; yields results in task (client-id) order."""

    def __init__(self, settings: ExecutionConfig, federation: Federation,
                 algorithm: Algorithm) -> None:
        self.settings = settings
        self.device = resolve_device(settings.device)
        self.autocast = use_device(self.device, settings.precision, settings.tf32,
                                   settings.cudnn_benchmark)
        self.algorithm = algorithm.to(self.device)

    @abstractmethod
    def fit(self, global_state: State, tasks: Sequence[ClientTask]) -> Iterator[FitResult]:
        """Fit every task from ``global_state``; yield one result per task, in task order.

        Updates and client states come back on the CPU, metrics as floats.
        """

    def fit_stacked(self, global_state: State, tasks: Sequence[ClientTask]) -> FitBatch:
        """:meth:`fit`, the updates stacked where the executor trains a round as one program.

        The default streams the results and stacks nothing.
        """
        return FitBatch(self.fit(global_state, tasks))

    def personalize(self, global_state: State, tasks: Sequence[ClientTask]
                    ) -> Iterator[ClientState]:
        """Run the post-federation stage of every task's client; yield states in task order."""
        on_device = state_to(global_state, self.device)
        for task in tasks:
            with autocast_training(self.autocast), self.algorithm.training.seeded(task.context):
                state = self.algorithm.personalization.personalize(
                    on_device, to_device(task.state, self.device), task.data, task.context)
            yield to_device(state, CPU)

    def close(self) -> None:  # noqa: B027 - optional hook, in-process executors have nothing
        """Release workers (nothing to do for in-process executors)."""


def to_device(state: ClientState, device: torch.device) -> ClientState:
    """A client state with its tensors on ``device`` (the CPU: checkpoint boundary)."""
    return ClientState(state_to(state.tensors, device), state.meta)


def results_to_cpu(results: Sequence[FitResult], device: torch.device) -> FitBatch:
    """A round's fit results from ``device`` on the CPU, with their updates as (K, ...) stacks.

    One device-to-host copy per tensor name and one for the metrics' device scalars, not a host
    synchronization per client and tensor (aggregation boundary).
    """
    on_device = device_stacks([r.update for r in results])
    updates = None if on_device is None else host_copies(on_device)
    sent = [state_to(r.update, CPU) for r in results] if updates is None else \
        rows(updates, len(results))
    kept = [r.client_state.tensors for r in results] if device.type == "cpu" else \
        states_to_cpu([r.client_state.tensors for r in results])
    per_client = zip(results, sent, kept, metrics_to_host([r.metrics for r in results]),
                     strict=True)
    return FitBatch([FitResult(update, ClientState(tensors, r.client_state.meta),
                               r.num_samples, metrics)
                     for r, update, tensors, metrics in per_client], updates,
                    on_device if device.type == "cuda" else None)


class SequentialExecutor(Executor):
    """One client after another in this process, on the configured device.

    A round's results wait on the device until its last fit, then cross to the CPU together
    (:func:`results_to_cpu`): moved after each fit, every client cost host synchronizations that
    left the GPU idle while the next client was prepared (issue 22).
    """

    def fit(self, global_state: State, tasks: Sequence[ClientTask]) -> Iterator[FitResult]:
        """Fit the tasks in order; the global state is moved to the device once per round."""
        yield from self._fit_round(global_state, tasks).results

    def fit_stacked(self, global_state: State, tasks: Sequence[ClientTask]) -> FitBatch:
        """:meth:`fit`, the updates stacked (one device-to-host copy per tensor name)."""
        return self._fit_round(global_state, tasks)

    def _fit_round(self, global_state: State, tasks: Sequence[ClientTask]) -> FitBatch:
        on_device = state_to(global_state, self.device)
        training, results = self.algorithm.training, []
        for t in tasks:
            with autocast_training(self.autocast), training.seeded(t.context):
                results.append(training.fit(on_device, to_device(t.state, self.device), t.data,
                                            t.context))
        return results_to_cpu(results, self.device)


def make_executor(settings: ExecutionConfig, federation: Federation,
                  algorithm: Algorithm) -> Executor:
    """Build the executor ``settings.executor`` names (the config checked the name)."""
    module, _, attr = EXECUTORS[settings.executor].partition(":")
    cls = getattr(importlib.import_module(module), attr)
    return cls(settings, federation, algorithm)
