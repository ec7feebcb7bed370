"""bench-scale's CPU targets, from the rows of one run: each a ratio measured in that run."""

from __future__ import annotations

from typing import Any


def ratio(rows: dict[str, Any], fast: str, slow: str) -> float | None:
    a, b = rows.get(fast, {}), rows.get(slow, {})
    if "per_round" not in a or "per_round" not in b:
        return None
    return b["per_round"] / a["per_round"]


def two_process_ceiling(rows: dict[str, Any]) -> float | None:
    """How much faster than sequential 2 x 1-thread processes could be: in half sequential-1t."""
    one, many = rows.get("sequential-1t", {}), rows.get("sequential", {})
    if "per_round" not in one or "per_round" not in many:
        return None
    return many["per_round"] / (one["per_round"] / 2)


def fmt(value: float | None, digits: int = 2, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:.{digits}f}{unit}"


def met(value: float | None, target: float) -> str:
    return "n/a" if value is None else ("yes" if value >= target else "NO")


def cpu_targets(a: dict[str, Any], b: dict[str, Any], evaluation: dict[str, Any],
                top: str | None) -> list[str]:
    """The Targets table's rows from (a)'s and (b)'s rows and the end-of-run ``evaluation``.

    ``top``: pflkit's fastest system on (a) (None: none ran).
    """
    lines: list[str] = []
    if top:
        vs_flower, vs_plain = ratio(a, top, "flower"), ratio(a, top, "plain")
        lines.append(f"| (a) pflkit's best ({top}) >= 2.6x faster than Flower per round | "
                     f"{fmt(vs_flower, 2, 'x')} | {met(vs_flower, 2.6)} |")
        lines.append(f"| (a) pflkit's best ({top}) >= 1.5x faster than the plain loop | "
                     f"{fmt(vs_plain, 2, 'x')} | {met(vs_plain, 1.5)} |")
        lines.append(f"| (a) pflkit's best ({top}) no slower than Flower on the same clients "
                     f"(issue 22) | {fmt(vs_flower, 2, 'x')} | {met(vs_flower, 1.0)} |")
    ray, ideal = ratio(a, "ray", "sequential"), ratio(a, "plain-2x1", "sequential")
    ceiling = two_process_ceiling(a)
    lines.append(f"| (a) Ray 2 x 1 thread >= 1.5x sequential (issue 22) | {fmt(ray, 2, 'x')} (the "
                 f"plain loop in 2 x 1-thread processes {fmt(ideal, 2, 'x')}; 2 x 1 thread at "
                 f"best, in half sequential-1t's round: {fmt(ceiling, 2, 'x')}) | "
                 f"{met(ray, 1.5)} |")
    fastest = min((k for k in ("batched", "batched-compiled") if "per_round" in b.get(k, {})),
                  key=lambda k: b[k]["per_round"], default="batched")
    batched = ratio(b, fastest, "sequential")
    lines.append(f"| (b) batched >= 3x sequential; issue 22: >= 2x, or a profile that shows why "
                 f"not (results/scale_cpu_profile.md) | {fmt(batched, 2, 'x')} ({fastest}) | "
                 f"{met(batched, 3.0)}; {met(batched, 2.0)} |")
    if evaluation and top:
        run = 100 * a[top]["per_round"] + evaluation["seconds"]
        share = evaluation["seconds"] / run
        lines.append(f"| end-of-run evaluation <= 10% of a 100-round run | "
                     f"{evaluation['seconds']:.1f} s of {run:.0f} s = {100 * share:.1f}% "
                     f"(run = 100 x {a[top]['per_round']:.2f} s + evaluation) | "
                     f"{met(0.10 / share, 1.0)} |")
    return lines
