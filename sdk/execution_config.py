"""Where a run's client work runs: the ``[execution]`` section of the run config.

Every name is resolved while the config is validated, so a typo (``executor = "batchd"``)
is one line naming the key before any data is loaded or any file is written. Only
``device``, ``precision`` and ``personalize_on`` can move the numbers.
"""

from __future__ import annotations

from typing import Annotated

import pydantic
import torch
from pydantic import AfterValidator, Strict

from pflkit.sdk.config_types import (
    STRICT_CONFIG,
    ConfigError,
    Text,
    closest,
    in_range,
    refuse_unused,
)
from pflkit.sdk.device import (
    DeviceError,
    check_device,
    check_precision,
    check_precision_on,
    resolve_device,
)

# executor name -> the class that runs client fits, imported on first use (Ray is optional);
# server/executors.py builds them (sdk -> server would be an upward import)
EXECUTORS: dict[str, str] = {
    "sequential": "pflkit.server.executors:SequentialExecutor",
    "batched": "pflkit.server.batched_executor:BatchedExecutor",
    "ray": "pflkit.server.ray_executor:RayExecutor",
}
PERSONALIZE_ENGINES = ("eager", "executorch")  # executorch: docs/on-device.md
# the settings only one executor or a CUDA device reads (any other value is refused there)
_CUDA_ONLY = ("tf32", "cudnn_benchmark", "cuda_graphs")
_BATCHED_ONLY = ("cuda_graphs", "conv_gemm", "compile_loss", "batch_clients")
_RAY_ONLY = ("ray_address", "ray_connect_timeout", "num_cpus", "num_gpus", "workers")


def _one_of(what: str, known: tuple[str, ...]) -> AfterValidator:
    """A validator: the name must be one of ``known`` (else the closest one is suggested)."""
    def check(name: str) -> str:
        if name not in known:
            guess = closest(name, known)
            hint = f"did you mean {guess!r}? " if guess else ""
            raise ValueError(f"unknown {what} {name!r} ({hint}known: {', '.join(known)})")
        return name
    return AfterValidator(check)


def _precision(name: str) -> str:
    check_precision(name)
    return name


@pydantic.dataclasses.dataclass(frozen=True, config=STRICT_CONFIG)
class ExecutionConfig:
    """Where client work runs; only device, precision and personalize_on move the numbers."""

    # sequential | batched | ray: see server/executors.py
    executor: Annotated[str, Strict(), _one_of("executor", tuple(EXECUTORS))] = "sequential"
    device: Annotated[str, Strict(), AfterValidator(check_device)] = "cpu"  # auto | cpu | cuda:N
    precision: Annotated[str, Strict(), AfterValidator(_precision)] = "fp32"  # fp32 | bf16 (CPU)
    # TF32 CUDA matmuls and convolutions: faster, but results then differ from the CPU's beyond
    # the GPU tests' tolerance (docs/simulator.md)
    tf32: Annotated[bool, Strict()] = False
    # CUDA: cuDNN's autotuner picks each convolution shape's algorithm (a one-off search per
    # shape; runs are then not bit-reproducible): docs/simulator.md
    cudnn_benchmark: Annotated[bool, Strict()] = False
    # batched executor on CUDA: each step shape captured once as a CUDA graph and replayed
    # (sdk/step_capture.py); false runs every step eagerly (the same arithmetic, slower)
    cuda_graphs: Annotated[bool, Strict()] = True
    # batched executor: convolutions as one matrix multiply over patches instead of cuDNN's
    # grouped convolutions (sdk/conv_gemm.py; the same result up to float rounding)
    conv_gemm: Annotated[bool, Strict()] = False
    # batched executor: each step's vmapped loss through torch.compile (fused kernels; compiling
    # takes seconds once per process and shape, and on the CPU needs a C++ compiler)
    compile_loss: Annotated[bool, Strict()] = False
    # batched executor: the most clients trained together in one program (None: a round's all);
    # a round of more trains in chunks of this size, one after another, to bound the memory
    # their activations take (1000 ConvNet clients x 20 rows: 9.2 GB on a GPU, issue 22)
    batch_clients: Annotated[int, Strict(), in_range(1, 1_000_000)] | None = None
    ray_address: Text | None = None  # None: start a local Ray on this machine's cores
    # Ray: seconds ray_address may take to accept a connection before the run is refused
    ray_connect_timeout: Annotated[float, Strict(), in_range(0.0, 3600.0, open_low=True)] = 10.0
    # Ray: CPUs per client fit (= torch threads of a worker)
    num_cpus: Annotated[float, Strict(), in_range(0.0, 1024.0, open_low=True)] = 1.0
    # Ray: GPUs per client fit (fractions share one GPU)
    num_gpus: Annotated[float, Strict(), in_range(0.0, 64.0)] = 0.0
    # Ray: worker processes (None: as many as fit)
    workers: Annotated[int, Strict(), in_range(1, 1024)] | None = None
    # the post-federation stage: eager | executorch (docs/on-device.md)
    personalize_on: Annotated[str, Strict(), _one_of("engine", PERSONALIZE_ENGINES)] = "eager"

    def __post_init__(self) -> None:
        check_precision_on(self.device, self.precision)  # "auto" is checked once resolved
        refuse_unused(self, self._unused())

    def _unused(self) -> dict[str, str]:
        """The settings this executor and device leave unused, each with why.

        Only an explicit ``device = "cpu"`` leaves the CUDA settings unused: under ``auto``
        they apply wherever it finds a GPU, so one config serves a laptop and a GPU box.
        """
        unused: dict[str, str] = {}
        if self.device == "cpu":
            unused |= dict.fromkeys(_CUDA_ONLY, 'device = "cpu" (only a CUDA device uses it)')
        if self.executor != "batched":
            unused |= dict.fromkeys(_BATCHED_ONLY, f'executor = "{self.executor}" (only the '
                                    'batched executor uses it)')
        if self.executor != "ray":
            unused |= dict.fromkeys(_RAY_ONLY, f'executor = "{self.executor}" (only the Ray '
                                    'executor uses it)')
        return unused

    def torch_device(self) -> torch.device:
        """The device this machine runs ``device`` on; a refusal names the setting."""
        try:
            return resolve_device(self.device)
        except DeviceError as err:
            raise ConfigError(f"execution.device: {err}") from None
