"""bench-scale's GPU targets: a TF32 system counts only where its 20-round top-1 stays close."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_scale_gpu import targets  # noqa: E402  (a script folder, not a package)


def rows(tf32_top1: float) -> dict:
    return {"a-batched": {"per_round": 0.35, "top1": 0.74},
            "a-batched-gemm": {"per_round": 0.2, "top1": 0.74},
            "a-batched-gemm-tf32": {"per_round": 0.1, "top1": 0.74},
            "a-plain": {"per_round": 3.0, "top1": 0.74},
            "a-batched-20": {"per_round": 0.35, "top1": 0.8731},
            "a-batched-gemm-tf32-20": {"per_round": 0.1, "top1": tf32_top1}}


def line(lines: list[str], start: str) -> str:
    return next(x for x in lines if x.startswith(start))


def test_tf32_within_0_3_points_counts_for_a():
    lines = targets({"rows": rows(0.8712)})
    assert line(lines, "| (a) batched <= 0.15") == \
        "| (a) batched <= 0.15 s/round | 0.100 s (a-batched-gemm-tf32) | yes |"
    assert line(lines, "| (a) batched >= 15x").endswith("| 30.0x | yes |")
    assert line(lines, "| batched-gemm-tf32: top-1").endswith("| 0.19 points | yes |")
    assert line(lines, "| batched-tf32: top-1").endswith("| not measured | n/a |")


def test_tf32_further_off_does_not_count():
    lines = targets({"rows": rows(0.8690)})
    assert line(lines, "| (a) batched <= 0.15") == \
        "| (a) batched <= 0.15 s/round | 0.200 s (a-batched-gemm) | NO |"
    assert line(lines, "| batched-gemm-tf32: top-1").endswith("| 0.41 points | NO |")


def test_the_compiled_a_system_counts_for_a_by_its_own_tf32_check():
    close = {**rows(0.8712), "a-batched-gemm-tf32-compiled": {"per_round": 0.08, "top1": 0.74},
             "a-batched-gemm-tf32-compiled-20": {"per_round": 0.08, "top1": 0.8720}}
    assert line(targets({"rows": close}), "| (a) batched <= 0.15") == \
        "| (a) batched <= 0.15 s/round | 0.080 s (a-batched-gemm-tf32-compiled) | yes |"
    far = {**close, "a-batched-gemm-tf32-compiled-20": {"per_round": 0.08, "top1": 0.8690}}
    lines = targets({"rows": far})
    assert line(lines, "| (a) batched <= 0.15").endswith("(a-batched-gemm-tf32) | yes |")
    assert line(lines, "| batched-gemm-tf32-compiled: top-1").endswith("| 0.41 points | NO |")
