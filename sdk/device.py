"""Where training and evaluation run: ``device = "auto" | "cpu" | "cuda" | "cuda:N"``.

Models are built and seeded on the CPU (the same initial weights whatever the device), then
moved; client data is moved to the device once per run; global and client states stay on the
CPU (they are aggregated, checkpointed and shipped as safetensors) and cross to the device
once per client fit. A precision of "bf16" runs training forward passes under autocast
(:func:`pflkit.sdk.training.autocast_training`) on the CPU; on a CUDA device it is refused,
since it was measured slower than fp32 there. TF32 (CUDA matmuls and convolutions with a
10-bit mantissa) is off unless asked for: results then differ from the CPU's beyond the GPU
tests' tolerance (docs/simulator.md, "Devices and precision").
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

import torch

from pflkit.sdk.data.federation import ClientData, Federation
from pflkit.sdk.data.tensors import LabeledTensors

State = dict[str, torch.Tensor]

DEVICE_CHOICES = "auto | cpu | cuda | cuda:N (N a GPU's index, 0-9999)"
PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}
_PATTERN = re.compile(r"^(auto|cpu|cuda(:(0|[1-9]\d{0,3}))?)$")  # N: 0-9999, no leading 0


class DeviceError(ValueError):
    """A device name is malformed or names hardware this machine does not have."""


def check_device(name: str) -> str:
    """Validate the spelling of a device name (no hardware check); return it."""
    if not isinstance(name, str) or not _PATTERN.match(name):
        raise DeviceError(f"device must be {DEVICE_CHOICES}, got {name!r}")
    return name


def resolve_device(name: str) -> torch.device:
    """Turn a device name into a torch device: "auto" is CUDA when present, else the CPU."""
    check_device(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"device {name!r}: this machine has no CUDA GPU "
                              "(use device \"cpu\" or \"auto\")")
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise DeviceError(f"device {name!r}: only {torch.cuda.device_count()} CUDA "
                              "device(s) present")
    return device


def check_precision(name: str) -> torch.dtype | None:
    """The autocast dtype of a precision name (None: plain fp32)."""
    if name not in PRECISIONS:
        raise DeviceError(f"precision must be one of {', '.join(PRECISIONS)}, got {name!r}")
    return PRECISIONS[name]


BF16_ON_CUDA = ('precision "bf16" is refused on a CUDA device: it was measured slower than fp32 '
                '(1.3-6 s/round vs 0.745 s, FedAvg ConvNet on an H100, issue 22); use "fp32"')


def check_precision_on(device: str | torch.device, precision: str) -> torch.dtype | None:
    """:func:`check_precision`, refusing bf16 on a CUDA device (``device``: a name or a device)."""
    dtype = check_precision(precision)
    kind = device.type if isinstance(device, torch.device) else device.partition(":")[0]
    if dtype is not None and kind == "cuda":
        raise DeviceError(BF16_ON_CUDA)
    return dtype


def use_device(device: torch.device, precision: str, tf32: bool = False,
               autotune: bool = False) -> torch.dtype | None:
    """Check ``precision`` on ``device``, set its TF32 and autotuner modes; the autocast dtype.

    Both are process-wide in torch; every executor and client of a process sets them the same
    way, on CUDA only, both ways (cuDNN convolutions use TF32 unless told not to). The autotuner
    (``cudnn.benchmark``) matters with TF32: the heuristic picks slow TF32 kernels for the
    batched executor's grouped convolutions (an H100 step of 1000 ConvNet clients: 84 ms
    heuristic, 50 ms autotuned, fp32 120 ms), but it searches once per new shape, which cost
    seconds a round while a round's active-client counts were new (issue 22).
    """
    dtype = check_precision_on(device, precision)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = autotune
    return dtype


def state_to(state: State, device: torch.device | str) -> State:
    """The same named tensors on ``device`` (no copy for tensors already there)."""
    return {k: v.to(device) for k, v in state.items()}


def metrics_to_host(metrics: Sequence[Mapping[str, float | torch.Tensor]]
                    ) -> list[dict[str, float]]:
    """Each fit's metrics as floats, every 0-dim tensor among them read in one transfer."""
    scalars = [v for m in metrics for v in m.values() if isinstance(v, torch.Tensor)]
    read = iter(torch.stack([t.reshape(()).to(scalars[0].device) for t in scalars]).tolist()
                if scalars else [])
    return [{k: next(read) if isinstance(v, torch.Tensor) else float(v) for k, v in m.items()}
            for m in metrics]


def data_to(data: LabeledTensors, device: torch.device | str) -> LabeledTensors:
    """A client's rows on ``device`` (done once per run, not per round)."""
    return LabeledTensors(data.x.to(device), data.y.to(device))


def federation_to(federation: Federation, device: torch.device | str) -> Federation:
    """Every client's rows and the global test set on ``device`` (once per run)."""

    def move(group: dict[int, ClientData]) -> dict[int, ClientData]:
        return {cid: ClientData(cid, data_to(c.train, device), data_to(c.test, device))
                for cid, c in group.items()}

    return dataclasses.replace(federation, clients=move(federation.clients),
                               new_clients=move(federation.new_clients),
                               test=data_to(federation.test, device))
