"""gpu_round_profile on the CPU: one profiled batched round splits into its phases."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu_round_profile  # noqa: E402  (a script folder, not a package)
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from pflkit.sdk.run_config import (  # noqa: E402
    AlgorithmConfig,
    DataConfig,
    ExecutionConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)


def tiny_config():
    return SimConfig(
        seed=0, rounds=3, eval_interval=3, checkpoint_interval=3,
        data=DataConfig(dataset="digits", kind="iid", num_clients=6),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig("fedavg"),
        training=TrainingConfig(clients_per_round=3, epochs=2, batch_size=16),
        execution=ExecutionConfig(executor="batched"))


def test_a_profiled_round_is_one_json_line_with_its_phases_and_host_ops(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_round_profile, "WARMUP", 1)
    config = tiny_config()
    row = json.loads(json.dumps(gpu_round_profile.profile_workload("tiny", config, tmp_path)))

    phases = row["phases"]
    assert {"sample", "tasks", "fit", "grid", "steps", "to_cpu", "fold", "commit"} <= set(phases)
    assert phases["fit"]["self_s"] < phases["fit"]["cpu_s"]  # grid, stack and steps inside it
    assert phases["steps"]["self_s"] == phases["steps"]["cpu_s"]
    assert 0.5 < row["covered"] <= 1.0 and row["wall_s"] > 0
    names = [name for name, _, _ in row["top_outside_steps"]]
    assert len(names) == 10 and "pflkit.steps" not in names
    assert row["launches"] == {} and "memory" not in row  # CPU: no CUDA counters


def test_covered_counts_overlapping_ranges_once():
    assert gpu_round_profile.covered_us([(0, 10), (5, 15), (20, 30), (21, 22)]) == 25


class FakeEvent:
    """A CUDA event on the host clock."""

    def record(self):
        self.at = time.perf_counter()

    def elapsed_time(self, end):
        return (end.at - self.at) * 1e3


def test_the_cuda_fields_are_filled_from_the_phase_marks(tmp_path, monkeypatch):
    """The GPU path's own code (events, allocator counters) on fakes: the lead has one GPU run."""
    allocated = iter(range(1 << 30, 1 << 40, 1 << 20))  # grows by 1 MB a reading
    for name, value in {"Event": lambda enable_timing: FakeEvent(), "synchronize": lambda: None,
                        "reset_peak_memory_stats": lambda: None,
                        "memory_allocated": lambda: next(allocated),
                        "max_memory_allocated": lambda: next(allocated),
                        "max_memory_reserved": lambda: 3 << 30}.items():
        monkeypatch.setattr(torch.cuda, name, value)
    monkeypatch.setattr(gpu_round_profile, "DEVICE", "cuda")  # the run itself stays on the CPU
    monkeypatch.setattr(gpu_round_profile, "WARMUP", 0)
    monkeypatch.setattr(gpu_round_profile, "profile", lambda activities: profile(
        activities=[ProfilerActivity.CPU]))
    row = json.loads(json.dumps(gpu_round_profile.profile_workload("tiny", tiny_config(),
                                                                   tmp_path)))
    steps = row["phases"]["steps"]
    assert steps["gpu_span_s"] > 0 and steps["peak_in_gb"] < steps["peak_out_gb"]
    assert 1.0 <= steps["mem_in_gb"] < steps["peak_out_gb"]
    memory = row["memory"]
    assert memory["peak_reserved_gb"] == 3.0 and memory["at_round_start_gb"] >= 1.0
    assert 0 < memory["data_gb"] < 0.01 and 0 < memory["weight_stack_gb"] < 0.01
