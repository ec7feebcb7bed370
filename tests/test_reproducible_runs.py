"""Two identical pfl-sim runs write byte-identical files (same seed, config and thread count)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import torch

from pflkit.sdk.tensorio import read_metadata, state_from_bytes, state_to_bytes

PFL_SIM = Path(sys.executable).parent / "pfl-sim"


def digests(run_dir: Path) -> dict[str, str]:
    """sha256 of every file under ``run_dir``, by relative path."""
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_two_pfl_sim_processes_write_byte_identical_run_directories(tmp_path):
    args = ["--dataset", "synthetic", "--clients", "4", "--clients-per-round", "2",
            "--model", "twonn", "--algorithm", "superfed_mm", "--rounds", "2",
            "--epochs", "1", "--quiet", "--out", "run"]
    for name in ("a", "b"):  # two processes, each in its own folder, same command
        (tmp_path / name).mkdir()
        subprocess.run([str(PFL_SIM), *args], cwd=tmp_path / name, check=True,
                       capture_output=True)
    first, second = digests(tmp_path / "a" / "run"), digests(tmp_path / "b" / "run")
    # every kind of file a run writes is there: checkpoints, client states, metrics, report
    assert {"global/latest.safetensors", "global/round_2.safetensors", "metrics.jsonl",
            "final.json", "report.md", "plots/accuracy.png", "config.toml"} <= set(first)
    assert any(name.startswith("personalized/") for name in first)
    assert first == second, {k for k in first if first[k] != second.get(k)}


def test_safetensors_bytes_do_not_depend_on_metadata_order():
    state = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(3, dtype=torch.float16)}
    metadata = {key: str(i) for i, key in enumerate("zyxwvuts")}
    written = {state_to_bytes(state, metadata) for _ in range(6)}
    assert len(written) == 1  # the library alone gives a different order almost every call
    data = written.pop()
    assert read_metadata(data) == metadata
    assert int.from_bytes(data[:8], "little") % 8 == 0  # tensor data stays 8-byte aligned
    back = state_from_bytes(data)
    assert all(torch.equal(back[k], state[k]) for k in state)
