"""The run report: report.md with PNG plots a person would rather look at than read."""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from pflkit.sdk.aggregation_config import AggregationConfig  # noqa: E402
from pflkit.sdk.config_types import stored_settings  # noqa: E402
from pflkit.sdk.rundir import RunDir  # noqa: E402
from pflkit.server.admin_view import epsilon_text  # noqa: E402
from pflkit.server.privacy_status import accountant  # noqa: E402

# summary fields that count something (clients, test rows): whole numbers, whatever their type
COUNTS = frozenset({"n", "clients", "own_clients"})


def _rows(run_dir: RunDir) -> list[dict[str, Any]]:
    path = run_dir.metrics
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _curve(ax: Any, rows: list[dict[str, Any]], key: str, label: str) -> None:
    points = [(r["round"] + 1, r[key]) for r in rows if not undefined(r.get(key))]
    if points:
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, marker="o" if len(points) < 30 else None, markersize=3, label=label)


def _save(fig: Any, ax: Any, path: Path, grid: bool = True) -> Path:
    """Finish a figure the same way everywhere: grid, legend, tight layout, PNG."""
    if grid:
        ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_curves(rows: list[dict[str, Any]], plots: Path, title: str) -> list[Path]:
    """Accuracy and loss per round."""
    panels = (
        ("accuracy", "top-1 accuracy", (
            ("global_top1", "global model, global test set"),
            ("personal_top1", "personalized, clients' own test (mean)"))),
        ("loss", "loss (nats)", (
            ("train_loss", "clients' training loss"),
            ("global_nll", "global model NLL, global test set"))),
    )
    made = []
    for name, ylabel, curves in panels:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for key, label in curves:
            _curve(ax, rows, key, label)
        ax.set(xlabel="rounds done", ylabel=ylabel, title=f"{title}: {name}")  # round r at r + 1
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # no round 1.5
        made.append(_save(fig, ax, plots / f"{name}.png"))
    return made


def plot_client_distribution(final: dict[str, Any], plots: Path) -> Path | None:
    """Histogram of per-client personalized accuracy (own test, and class-weighted global)."""
    clients = final.get("clients", {}).get("per_client", [])
    if not clients:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, label in (("own_top1", "own test split"), ("class_weighted", "class-weighted global")):
        values = [c[key] for c in clients if not undefined(c[key])]
        if values:
            ax.hist(values, bins=20, range=(0, 1), alpha=0.6, label=label)
    ax.set(xlabel="personalized top-1 accuracy", ylabel="clients",
           title="per-client accuracy after the last round")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # no 2.5 clients
    return _save(fig, ax, plots / "clients.png", grid=False)


def swept_choice(algorithm: str) -> str:
    """The name of the numeric choice a method's evaluation sweeps (its declaration's first)."""
    from pflkit.sdk.algorithms.base import algorithm_class
    from pflkit.sdk.algorithms.inference import NUMBER

    try:
        specs = algorithm_class(algorithm).Inference.choices
    except (ValueError, ImportError):  # a method this process cannot import: a plain label
        return "choice"
    return next((s.name for s in specs if s.kind == NUMBER), "choice")


def plot_choice_sweep(final: dict[str, Any], plots: Path, name: str = "choice"
                      ) -> Path | None:
    """Accuracy vs the numeric choice ``name`` with a +-1 std band across clients."""
    by_choice = final.get("clients", {}).get("by_choice", {})
    points = []
    for label, summary in by_choice.items():
        try:
            point = (float(label), summary["own_top1_mean"], summary["own_top1_std"])
        except (ValueError, KeyError):
            continue  # named choices such as "best"
        if not any(map(undefined, point)):
            points.append(point)
    if len(points) < 2:
        return None
    xs, mean, std = zip(*sorted(points), strict=True)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(xs, mean, marker="o", markersize=3, label="mean over clients")
    ax.fill_between(xs, [m - s for m, s in zip(mean, std, strict=True)],
                    [m + s for m, s in zip(mean, std, strict=True)], alpha=0.25, label="+-1 std")
    ax.set(xlabel=name, ylabel="top-1, clients' own test",
           title=f"personalized accuracy vs {name}")
    return _save(fig, ax, plots / f"{name}.png")


def undefined(value: Any) -> bool:
    """A number a run could not define: null in its JSON files, NaN in memory."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _fmt(value: Any, key: str = "", fmt: str = ".4f") -> str:
    """A table cell: ``n/a``, a count as a whole number (``20``, not ``20.0000``), or ``fmt``."""
    if undefined(value):
        return "n/a"
    if key in COUNTS and isinstance(value, float) and value.is_integer():
        return str(int(value))
    return format(value, fmt) if isinstance(value, float) else str(value)


def _privacy(rows: list[dict[str, Any]], rules: dict[str, Any]) -> list[str]:
    """The DP guarantee after the last recorded round (docs/privacy.md), if the run had one.

    ``rules``: the run's ``[aggregation]``, which says how epsilon was accounted (secure
    aggregation gets no amplification by sampling).
    """
    last = next((r for r in reversed(rows) if "dp_epsilon" in r), None)
    if last is None:
        return []
    epsilon, delta, noise = (last.get(k) for k in ("dp_epsilon", "dp_delta",
                                                   "dp_noise_multiplier"))
    done = last["round"] + 1
    with stored_settings():  # the run's own config, maybe from an older pflkit
        rules_read = AggregationConfig(**rules)
    return ["## Privacy", "",
            f"User-level DP-FedAvg on the shared tensors: epsilon = "
            f"{'n/a' if undefined(epsilon) else epsilon_text(epsilon)} at delta = "
            f"{_fmt(delta, fmt='g')} after {done} round{'' if done == 1 else 's'} (noise "
            f"multiplier {_fmt(noise, fmt='.4g')}; accountant: {accountant(rules_read)}).",
            "", *_clip_norms(rows)]


def _clip_norms(rows: list[dict[str, Any]]) -> list[str]:
    """The clip norm each round used (adaptive clipping moves it), in one line."""
    norms = [(r["round"], r["dp_clip_norm"]) for r in rows
             if not undefined(r.get("dp_clip_norm"))]
    if not norms:
        return []
    values = [c for _, c in norms]
    if min(values) == max(values):
        return [f"Clip norm: {values[0]:.4g} (fixed).", ""]
    return [f"Clip norm (adaptive): {values[0]:.4g} in round {norms[0][0]}, {values[-1]:.4g} in "
            f"round {norms[-1][0]} (min {min(values):.4g}, max {max(values):.4g}).", ""]


def _diverged(rows: list[dict[str, Any]], final: dict[str, Any]) -> list[str]:
    """The client fits and post-federation stages dropped as diverged (server/sim_divergence.py)."""
    fits = [(r["round"], c) for r in rows for c in r.get("diverged", [])]
    stages = final.get("diverged", [])
    if not fits and not stages:
        return []
    lines = ["## Diverged fits", ""]
    if fits:
        listed = ", ".join(f"client {c} in round {r}" for r, c in fits[:20])
        more = f" and {len(fits) - 20} more" if len(fits) > 20 else ""
        lines += [f"{len(fits)} client fit(s) ended with NaN or Inf weights or loss and were left "
                  f"out of their rounds (each client kept its state): {listed}{more}.", ""]
    if stages:
        lines += [f"{len(stages)} client(s)' post-federation stage diverged; they were scored "
                  f"with their state from before it: clients {', '.join(map(str, stages))}.", ""]
    return lines


def _versus_generic(final: dict[str, Any]) -> list[str]:
    """New clients' personalized models beside the generic model, scored the same way."""
    new = final.get("new_clients", {})
    paired = new.get("versus_generic")
    if not paired:
        return []
    summaries = {"summary": new["summary"], **new.get("by_choice", {})}
    lines = ["## New clients: personalized vs generic model", "",
             "Each new client's models on the same rows: the global test set weighted by its "
             "class distribution (FedRoD eq. 20) and its own test split; \"beats\" counts the "
             "clients whose model scores higher than the generic model.", "",
             "| model | class-weighted (mean) | own test (mean) | beats generic, class-weighted "
             "| beats generic, own test |", "|---|---|---|---|---|"]
    for label, counts in paired.items():
        name = "personalized (headline)" if label == "summary" else label
        summary = summaries.get(label, {})
        lines.append(f"| {name} | {_fmt(summary.get('class_weighted_mean'))} | "
                     f"{_fmt(summary.get('own_top1_mean'))} | "
                     f"{_beats(counts.get('class_weighted'))} | {_beats(counts.get('own_top1'))} |")
    generic = new["generic"]["summary"]
    lines += [f"| generic | {_fmt(generic.get('class_weighted_mean'))} | "
              f"{_fmt(generic.get('own_top1_mean'))} | | |", ""]
    return lines


def _beats(counts: dict[str, int] | None) -> str:
    if not counts:
        return "n/a"
    return f"{counts['beats']} of {counts['clients']} ({counts['ties']} ties)"


def write_report(run_dir: Path) -> Path:
    """Write ``report.md`` (and plots) for a run directory; returns its path."""
    files = RunDir(run_dir)
    plots = files.plots
    plots.mkdir(exist_ok=True)
    rows = _rows(files)
    final = json.loads(files.final.read_text()) if files.final.is_file() else {}
    config = files.config_file.read_text() if files.config_file.is_file() else ""
    settings = tomllib.loads(config)
    title = settings.get("algorithm", {}).get("name", "run")
    plot_curves(rows, plots, title)
    dist = plot_client_distribution(final, plots)
    lines = [f"# pflkit run report: {files.path.name}", ""]
    if final:
        lines += ["## Final (last round, not the best)", "", "| metric | value |", "|---|---|"]
        for key, value in final.get("global_model", {}).items():
            lines.append(f"| global model, global test: {key} | {_fmt(value, key)} |")
        for group in ("clients", "new_clients"):
            for key, value in final.get(group, {}).get("summary", {}).items():
                lines.append(f"| {group}: {key} | {_fmt(value, key)} |")
        lines.append("")
    lines += _versus_generic(final) + _privacy(rows, settings.get("aggregation", {}))
    lines += _diverged(rows, final)
    lines += ["## Curves", "", "![accuracy](plots/accuracy.png)", "", "![loss](plots/loss.png)", ""]
    if dist:
        lines += ["## Clients", "", "![clients](plots/clients.png)", ""]
    swept = swept_choice(title)
    if plot_choice_sweep(final, plots, swept):
        lines += [f"## Accuracy vs {swept}", "", f"![{swept}](plots/{swept}.png)", ""]
    if (plots / "partition.png").is_file():
        lines += ["## Partition", "", "![partition](plots/partition.png)", "",
                  "Per-client class counts: `partition.txt`.", ""]
        table = files.partition_table.read_text() if files.partition_table.is_file() else ""
        if table.startswith("natural partition"):  # the clients are the dataset's users
            lines += [table.partition("\n")[0] + "; `partition.txt` names each client's user.",
                      ""]
    lines += ["## Configuration", "", "```toml", config.rstrip(), "```", ""]
    files.report.write_text("\n".join(lines))
    return files.report
