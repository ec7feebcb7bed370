"""bench-pflmoe's report: the paper's Tables I-II, the markdown table beside them, the curve."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common import RESULTS

PAPER = {  # alpha -> method -> (local test, global test), Tables I-II (FMNIST + LeNet-5)
    0.5: {"local": (84.87, 57.77), "fedavg": (90.0, 90.0), "fb": (92.84, 83.35),
          "mf": (92.85, 85.45), "mfe": (92.89, 85.3)},
    0.9: {"local": (82.23, 65.28), "fedavg": (90.31, 90.31), "fb": (91.84, 85.91),
          "mf": (92.02, 87.69), "mfe": (92.01, 87.67)},
    2.0: {"local": (78.63, 71.06), "fedavg": (90.5, 90.5), "fb": (90.47, 87.77),
          "mf": (90.97, 89.37), "mfe": (90.93, 89.18)},
}
LABELS = {"local": "Local", "fedavg": "FedAvg", "fb": "PFL-FB", "mf": "PFL-MF",
          "mfe": "PFL-MFE"}


def table(results: dict[str, Any], rounds: int, per_epochs: int, local_epochs: int,
          name: str, fedavg_note: str | None = None) -> str:
    """The markdown table (two decimals: the targets have two); ``fedavg_note`` replaces the
    default sentence about the FedAvg rounds."""
    head = ("| alpha | method | local test | global test | paper local / global | target |\n"
            "|---|---|---|---|---|---|\n")
    lines = []
    for alpha, res in results.items():
        for key, label in LABELS.items():
            if key not in res:
                continue
            r, (pl, pg) = res[key], PAPER[float(alpha)][key]
            local, glob = 100 * r["local_test"], 100 * r["global_test"]
            target = ""
            if key == "mfe":
                met = ["met" if v >= t - 1.5 else "MISSED" for v, t in ((local, pl), (glob, pg))]
                target = f">= {pl - 1.5:.2f} / >= {pg - 1.5:.2f} ({' / '.join(met)})"
            lines.append(f"| {alpha} | {label} | {local:.2f} | {glob:.2f} | {pl} / {pg} | "
                         f"{target} |")
    fedavg_note = fedavg_note or f"FedAvg: {rounds} rounds (paper 1000; CPU budget)"
    notes = (f"\n{fedavg_note}, LAST round's model (the paper "
             f"keeps the best round's). Stage 2: {per_epochs} epochs (paper 200). Local-only: "
             f"3 x {local_epochs} epochs (paper 300), scored on a seeded 2000-image subset of "
             f"the global test set. Curve: {name}_curve.png.\n")
    return head + "\n".join(lines) + "\n" + notes


def plot(curves: dict[str, list[dict[str, float]]], name: str, folder: Path = RESULTS) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for alpha, curve in curves.items():
        rounds = [c["round"] for c in curve]
        for ax, key in zip(axes, ("global_test", "local_test"), strict=True):
            ax.plot(rounds, [100 * c[key] for c in curve], label=f"alpha {alpha}")
    for ax, title in zip(axes, ("FedAvg global test", "FedAvg local test (class-weighted)"),
                         strict=True):
        ax.axhline(90.0, color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel("round")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(title + " (paper ~90, 1000 rounds)", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(folder / f"{name}_curve.png", dpi=110)
    plt.close(fig)


def paired(per_client: dict[str, dict[str, list[list[float]]]]) -> dict[str, dict[str, Any]]:
    """Each personalized method against FedAvg, client by client (local test, in points).

    Mean difference with a normal 95% interval over the clients, and how many clients gained.
    """
    out: dict[str, dict[str, Any]] = {}
    for alpha, pairs in per_client.items():
        base = [p[0] for p in pairs["fedavg"]]
        for method in ("fb", "mf", "mfe"):
            diff = [100 * (p[0] - b) for p, b in zip(pairs[method], base, strict=True)]
            n = len(diff)
            mean = sum(diff) / n
            sd = (sum((d - mean) ** 2 for d in diff) / (n - 1)) ** 0.5 if n > 1 else 0.0
            out[f"{alpha}/{method}"] = {"mean": mean, "ci95": 1.96 * sd / n ** 0.5,
                                        "gained": sum(d > 0 for d in diff), "clients": n}
    return out


def render(payload: dict[str, Any], folder: Path, name: str) -> str:
    """bench_pflmoe_gpu's results page: the table, the paired comparison, the curve."""
    rounds = payload["rounds"]
    ran = ", ".join(f"alpha {k}: {v}" for k, v in rounds.items())
    budget = payload["budget_s"]
    note = (f"FedAvg on {payload['device']} ({payload['command'].split(' python3')[0]}): "
            f"rounds run {ran} (planned {payload['planned_rounds']}, paper 1000"
            + (f"; FedAvg stage bounded by BUDGET_S = {budget:g} s" if budget is not None
               else "") + ")")
    md = table(payload["results"], payload["planned_rounds"], payload["per_epochs"], 5, name, note)
    md += ("Local rows: copied from the CPU run (pflmoe.json). Stage 2 and scoring ran in CPU "
           "worker processes.\n")
    if payload.get("resumed_from"):
        done = ", ".join(f"alpha {k}: {v}" for k, v in payload["resumed_from"].items())
        md += (f"FedAvg resumed an earlier run (RESUME) after its rounds {done}; the FedAvg "
               "wall times below are this run's part only.\n")
    md += ("\nPer client, against FedAvg (local test, points): mean "
           "difference, 95% interval, clients that gained.\n\n"
           "| alpha | method | mean | 95% | gained |\n|---|---|---|---|---|\n")
    for key, row in payload["paired"].items():
        alpha, method = key.split("/")
        md += (f"| {alpha} | {LABELS[method]} | {row['mean']:+.2f} | +-{row['ci95']:.2f} | "
               f"{row['gained']}/{row['clients']} |\n")
    for alpha, error in payload.get("failed", {}).items():
        md += f"\nalpha {alpha}: FedAvg failed ({error}); its rounds so far are in the run tar.\n"
    seconds = ", ".join(f"{k} {v:.0f} s" for k, v in payload["seconds"].items())
    plot(payload["curves"], name, folder)
    return f"# bench-pflmoe on a GPU\n\nCommand: `{payload['command']}`\n\n{md}\nWall: {seconds}.\n"
