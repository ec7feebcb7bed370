"""What the GPU benchmarks share: worker pools, the device's name, run folders packed for OUT,
the results files and RENDER_ONLY.

A lent GPU machine is bare at each start: run folders travel back as tars in OUT (its files
come back: at most 8, 16 MiB each), and RESUME unpacks them there to train on in a later session.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import tarfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import torch

from pflkit.sdk.device import resolve_device
from pflkit.sdk.run_config import SimConfig
from pflkit.server.simulator import Simulation

Label = TypeVar("Label")


@dataclass(frozen=True)
class RunJob(Generic[Label]):
    """One simulation a worker process trains until its rounds or the deadline."""

    label: Label  # what the results call it: a method's name, an alpha
    config: SimConfig
    run_dir: Path
    deadline: float  # time.monotonic(): one clock for every process of the machine
    resume: bool  # the folder holds a run (RESUME): train it on


@contextmanager
def opened(job: RunJob[Any]) -> Iterator[Simulation]:
    """The job's simulation, new or resumed, on one torch thread; closed after.

    On CUDA it runs on a stream of its own: runs that are threads of one process then put
    their kernels on the GPU side by side (a small model's step leaves most of it idle), where
    processes take turns on it.
    """
    torch.set_num_threads(1)
    device = resolve_device(job.config.execution.device)
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    with torch.cuda.stream(stream):  # None: no stream to set
        sim = Simulation(job.config, job.run_dir, resume=job.resume, progress=False)
        try:
            yield sim
        finally:
            sim.close()


def pool(processes: bool, workers: int) -> Executor:
    """``workers`` spawned processes (CUDA needs spawn), or ``workers`` threads of this one."""
    if not processes:
        return ThreadPoolExecutor(workers)
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


def device_name(device: str) -> str:
    """The GPU's name (or the CPU's) and torch's version, for the results."""
    if device.startswith("cuda") and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(torch.device(device))}, torch {torch.__version__}"
    return f"CPU ({os.cpu_count()} cores), torch {torch.__version__}"


def pack(folder: Path, tar_path: Path, under: str = "") -> None:
    """``folder`` as one .tar.gz, named by the folder (inside ``under``/ when given)."""
    tar_path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tar_path, "w:gz") as tar:
        tar.add(folder, arcname=f"{under}/{folder.name}" if under else folder.name)


def unpack(tar_paths: Sequence[Path], runs: Path) -> None:
    """A fresh ``runs`` folder: empty, or (RESUME) what previous sessions packed of it."""
    shutil.rmtree(runs, ignore_errors=True)
    for tar_path in tar_paths:
        with tarfile.open(tar_path) as tar:
            tar.extractall(runs.parent, filter="data")


Render = Callable[[dict[str, Any], Path, str], str]  # (payload, folder, name) -> page


def write(payload: dict[str, Any], out: Path, name: str, render: Render) -> None:
    """<name>.json, .md (and what ``render`` draws) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=1) + "\n")
    md = render(payload, out, name)
    (out / f"{name}.md").write_text(md)
    print(md, flush=True)


def render_only(results: Path, render: Render) -> bool:
    """RENDER_ONLY=<a GPU run's JSON>: write its page into ``results``; False if not asked."""
    if not os.environ.get("RENDER_ONLY"):
        return False
    path = Path(os.environ["RENDER_ONLY"])
    write(json.loads(path.read_text()), results, path.stem, render)
    return True


class GpuSettings(Protocol):
    """What a GPU benchmark's settings name: where its results go."""

    @property
    def out(self) -> Path: ...

    @property
    def name(self) -> str: ...


S = TypeVar("S", bound=GpuSettings)


def main_of(from_env: Callable[[], S], bench: Callable[[S], dict[str, Any]],
            render: Render, results: Path) -> None:
    """A GPU benchmark's main: RENDER_ONLY's page, or a run with the env's settings."""
    if render_only(results, render):  # a GPU run's JSON -> benchmarks/results
        return
    settings = from_env()
    write(bench(settings), settings.out, settings.name, render)
