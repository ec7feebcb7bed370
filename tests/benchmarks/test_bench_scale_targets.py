"""bench-scale's CPU targets: the Ray row says how fast 2 x 1 thread could be on the machine."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_scale import render  # noqa: E402  (a script folder, not a package)


def result(a_rows: dict) -> dict:
    return {"rounds": 2, "warmup": 1, "threads": 2, "a": {"rows": a_rows, "evaluation": {}},
            "b": {"rows": {}}, "gpu": {"skipped": "no GPU"}}


def timed(per_round: float) -> dict:
    return {"seconds": [per_round] * 2, "per_round": per_round, "top1": 0.7395}


def ray_line(text: str) -> str:
    return next(x for x in text.splitlines() if x.startswith("| (a) Ray 2 x 1 thread"))


def test_the_ray_target_names_the_two_process_ceiling():
    text = render(result({"sequential": timed(6.0), "sequential-1t": timed(10.5),
                          "plain-2x1": timed(5.8), "ray": timed(6.2)}))
    assert ray_line(text) == (
        "| (a) Ray 2 x 1 thread >= 1.5x sequential (issue 22) | 0.97x (the plain loop in 2 x "
        "1-thread processes 1.03x; 2 x 1 thread at best, in half sequential-1t's round: 1.14x) | "
        "NO |")


def test_without_a_one_thread_run_the_ceiling_is_not_guessed():
    text = render(result({"sequential": timed(6.0), "ray": timed(4.0)}))
    assert ray_line(text).endswith("in half sequential-1t's round: n/a) | yes |")
