"""The batched executor: the clients of a round train together as one program.

Each round's sampled clients go to :meth:`DeviceTraining.fit_batch` in one call (stacked weights,
vmapped loss, masked batches: :mod:`pflkit.sdk.batched_training`); the results equal the
sequential executor's up to float rounding. A method or model that cannot batch
(:meth:`DeviceTraining.batching_blocker`) trains its clients one by one; the reason is logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import torch

from pflkit.sdk.algorithms.base import Algorithm, ClientState, FitJob, FitResult, State
from pflkit.sdk.data.federation import Federation
from pflkit.sdk.device import state_to
from pflkit.sdk.run_config import ExecutionConfig
from pflkit.sdk.step_capture import cuda_graphs
from pflkit.sdk.training import autocast_training
from pflkit.server.executors import CPU, ClientTask, SequentialExecutor, to_device

log = logging.getLogger(__name__)


class BatchedExecutor(SequentialExecutor):
    """All of a round's clients in one batched fit; one by one where the method cannot batch."""

    def __init__(self, settings: ExecutionConfig, federation: Federation,
                 algorithm: Algorithm) -> None:
        super().__init__(settings, federation, algorithm)
        self.blocker = self.algorithm.training.batching_blocker()
        if self.blocker is not None:
            log.warning("batched executor: %s; training clients one by one", self.blocker)

    def fit(self, global_state: State, tasks: Sequence[ClientTask]) -> Iterator[FitResult]:
        """One ``training.fit_batch`` over every task; results in task order, on the CPU."""
        if self.blocker is not None or not tasks:
            yield from super().fit(global_state, tasks)
            return
        on_device = state_to(global_state, self.device)
        jobs = [FitJob(to_device(t.state, self.device), t.data, t.context) for t in tasks]
        with autocast_training(self.autocast), cuda_graphs(self.settings.cuda_graphs):
            results = self.algorithm.training.fit_batch(on_device, jobs)
        if self.device.type == "cpu":
            yield from results
            return
        updates = states_to_cpu([r.update for r in results])
        kept = states_to_cpu([r.client_state.tensors for r in results])
        for result, update, tensors in zip(results, updates, kept, strict=True):
            yield FitResult(update, ClientState(tensors, result.client_state.meta),
                            result.num_samples, result.metrics)


def states_to_cpu(states: Sequence[State]) -> list[State]:
    """Many clients' states on the CPU, one device-to-host copy per tensor name.

    A batched fit's results are slices of (K, ...) device stacks; moving them one by one costs
    a host round trip per client and name (8000 of them for 1000 ConvNet clients, issue 22).
    States of other names or shapes move one by one.
    """
    if not states or any(_layout(s) != _layout(states[0]) for s in states):
        return [state_to(s, CPU) for s in states]
    stacks = {n: torch.stack([s[n] for s in states]).cpu() for n in states[0]}
    return [{n: stack[k] for n, stack in stacks.items()} for k in range(len(states))]


def _layout(state: State) -> list[tuple[str, torch.Size, torch.dtype]]:
    return [(n, t.shape, t.dtype) for n, t in state.items()]
