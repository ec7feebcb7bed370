"""The batched executor: the clients of a round train together as one program.

Each round's sampled clients go to :meth:`DeviceTraining.fit_batch` in one call (stacked weights,
vmapped loss, masked batches: :mod:`pflkit.sdk.batched_training`); the results equal the
sequential executor's up to float rounding. A method or model that cannot batch
(:meth:`DeviceTraining.batching_blocker`) trains its clients one by one; the reason is logged once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

from pflkit.sdk.algorithms.base import Algorithm, FitJob, FitResult, State
from pflkit.sdk.batched_training import compiled_loss
from pflkit.sdk.config_types import ConfigError
from pflkit.sdk.conv_gemm import gemm_convolutions
from pflkit.sdk.data.federation import Federation
from pflkit.sdk.device import state_to
from pflkit.sdk.phases import phase
from pflkit.sdk.run_config import ExecutionConfig
from pflkit.sdk.step_capture import cuda_graphs
from pflkit.sdk.training import autocast_training
from pflkit.server.executors import (
    ClientTask,
    FitBatch,
    SequentialExecutor,
    results_to_cpu,
    to_device,
)

log = logging.getLogger(__name__)


def check_cpp_compiler() -> None:
    """Refuse ``compile_loss`` on the CPU without the C++ compiler inductor builds kernels with.

    Found missing only at the first step's compile, it was torch's multi-line InductorError
    after the data was loaded and the run folder written.
    """
    from torch._inductor import cpp_builder  # imported only when a loss is to be compiled

    try:
        cpp_builder.get_cpp_compiler()
    except RuntimeError as err:
        raise ConfigError("execution.compile_loss: torch.compile needs a C++ compiler on the "
                          f"CPU and found none ({type(err).__name__}: install g++ or set CXX)"
                          ) from None


class BatchedExecutor(SequentialExecutor):
    """All of a round's clients in one batched fit; one by one where the method cannot batch."""

    def __init__(self, settings: ExecutionConfig, federation: Federation,
                 algorithm: Algorithm) -> None:
        super().__init__(settings, federation, algorithm)
        if settings.compile_loss and self.device.type == "cpu":
            check_cpp_compiler()
        self.blocker = self.algorithm.training.batching_blocker()
        if self.blocker is not None:
            log.warning("batched executor: %s; training clients one by one", self.blocker)

    def fit(self, global_state: State, tasks: Sequence[ClientTask]) -> Iterator[FitResult]:
        """One ``training.fit_batch`` over every task; results in task order, on the CPU."""
        yield from self.fit_stacked(global_state, tasks).results

    def fit_stacked(self, global_state: State, tasks: Sequence[ClientTask]) -> FitBatch:
        """One ``training.fit_batch`` over every task, the updates as (K, ...) CPU stacks."""
        if self.blocker is not None or not tasks:
            return FitBatch(super().fit(global_state, tasks))
        with phase("to_device"):
            on_device = state_to(global_state, self.device)
            jobs = [FitJob(to_device(t.state, self.device), t.data, t.context) for t in tasks]
        size = self.settings.batch_clients or len(jobs)
        with phase("fit"), autocast_training(self.autocast), \
                cuda_graphs(self.settings.cuda_graphs), \
                gemm_convolutions(self.settings.conv_gemm), \
                compiled_loss(self.settings.compile_loss):
            results = [result for start in range(0, len(jobs), size)
                       for result in self.algorithm.training.fit_batch(
                           on_device, jobs[start:start + size])]
        with phase("to_cpu"):
            return results_to_cpu(results, self.device)
