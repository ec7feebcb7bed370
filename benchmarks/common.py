"""Shared benchmark plumbing: run simulator configs, write JSON results and markdown tables."""

from __future__ import annotations

import json
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from pflkit.sdk.run_config import SimConfig
from pflkit.server.simulator import Simulation

RESULTS = Path(__file__).resolve().parent / "results"
RUNS = Path(os.environ.get("PFLKIT_BENCH_RUNS", "/tmp/pflkit-bench-runs"))


def set_threads() -> int:
    """Benchmarks use PFLKIT_THREADS torch threads (default 1) so two can share 2 cores."""
    threads = int(os.environ.get("PFLKIT_THREADS", "1"))
    torch.set_num_threads(threads)
    return threads


def run(config: SimConfig, name: str) -> dict[str, Any]:
    """Run one simulation in a fresh run directory; return final.json plus timing."""
    run_dir = RUNS / name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    started = time.perf_counter()
    result = Simulation(config, run_dir, progress=True).run()
    return {"name": name, "run_dir": str(run_dir), "seconds": time.perf_counter() - started,
            "final": result.final, "config": config.to_toml()}


def cpu_model() -> str:
    """The CPU's name, family and model: 2-core machines of different CPUs differ up to 2.5x.

    Linux's /proc/cpuinfo (platform.processor() is empty there); the architecture elsewhere.
    """
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    fields: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    return (f"{fields['model name']} (family {fields.get('cpu family', '?')}, "
            f"model {fields.get('model', '?')})")


def machine() -> dict[str, Any]:
    """Where the numbers were measured."""
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__,
            "threads": torch.get_num_threads()}


def save(name: str, payload: dict[str, Any]) -> Path:
    """Write benchmarks/results/<name>.json."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2, default=str) + "\n")
    return path


def pct(value: float) -> str:
    """A share as a percentage with one decimal."""
    return f"{100 * value:.1f}"


def command_block(commands: list[str]) -> list[str]:
    """Markdown lines showing benchmark commands, marked as not run by the docs test."""
    return ["*Not run by `make test`: benchmark runs that take hours; their results are "
            "below.*", "```bash", *commands, "```"]


def subset(variable: str, every: list[str]) -> list[str]:
    """The comma-separated subset named by an environment variable (default: every one)."""
    wanted = [w.strip() for w in os.environ.get(variable, ",".join(every)).split(",") if w.strip()]
    unknown = sorted(set(wanted) - set(every))
    if unknown:
        raise SystemExit(f"unknown {variable} {unknown}; choose from {', '.join(every)}")
    return wanted
