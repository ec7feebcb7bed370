"""bench-baselines: the SuPerFed paper's comparison methods in one harness (000, Table 1 protocol).

Fashion-MNIST, pathological non-IID (2 shards per client), 50 clients, 5 per round, E=10,
B=10, lr 0.01 x 0.99^round, SGD m=0.9, wd 1e-4, TwoNN, each client keeps 20% of its rows as
its own test split. Per method: personalized top-1 (mean +- std over clients, own test),
ECE and MCE (15 bins, whole test split), after the LAST round.

The nine methods of the SuPerFed paper's tables: FedAvg, FedProx, SCAFFOLD, LG-FedAvg,
FedPer, APFL, pFedMe, Ditto, FedRep. Also run: FedAvg+FT (``fedavg_ft``) and local-only
(``local``), which the SuPerFed targets compare against too.

FedAvg is not trained separately: ``fedavg_ft`` trains exactly as ``fedavg`` (same seeds and
``fit``), so FedAvg's row is its final global model on each client's own test split.
    make bench-baselines                 (ROUNDS=100, all methods, PFLKIT_THREADS=1)
    ROUNDS=500 overrides a setting's default rounds (100; twonn-50-r500: 500)
    METHODS=fedper,fedrep    (a subset; rows merge into baselines.json, also while another runs)
    ROUNDS_PFEDME=50         (fewer rounds for one method, when the clock demands)
    DEADLINE=01:30           (UTC; shrink every remaining method's rounds by one factor so that
                              all of them finish by then; planned with COST, never printed)
    SETTING=twonn-100        (100 clients; twocnn-50: the TwoCNN-style net; twonn-50-r500: 50
                              clients at R=500. Results: baselines_<setting>.json/.md)
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from common import RESULTS, pct, run, save, set_threads, subset

from pflkit.sdk.builder import build_run
from pflkit.sdk.evaluation import DivergedModel, evaluate_client, summarize
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.rundir import RunDir
from pflkit.sdk.tensorio import load_state

PAPER_NINE = ("fedavg", "fedprox", "scaffold", "lg_fedavg", "fedper", "apfl", "pfedme", "ditto",
              "fedrep")
RUN_ORDER = ("fedavg_ft", "fedprox", "local", "fedper", "lg_fedavg", "fedrep", "scaffold",
             "ditto", "apfl", "pfedme")  # fedavg comes from the fedavg_ft run
# cost of a round (FedAvg = 1) estimated at 00439e4: DEADLINE planning only, never printed
COST = {"fedavg_ft": 1.0, "fedprox": 1.8, "local": 1.0, "fedper": 1.1, "lg_fedavg": 0.9,
        "fedrep": 0.8, "scaffold": 1.3, "ditto": 2.0, "apfl": 2.8, "pfedme": 5.9}
LABELS = {"fedavg": "FedAvg", "fedprox": "FedProx", "fedavg_ft": "FedAvg+FT",
          "local": "Local only", "scaffold": "SCAFFOLD", "pfedme": "pFedMe", "ditto": "Ditto",
          "apfl": "APFL", "fedper": "FedPer", "fedrep": "FedRep", "lg_fedavg": "LG-FedAvg"}


# setting -> (model, clients, default rounds) of the SuPerFed paper's Table 1 protocol on FMNIST;
# twonn-50-r500 is twonn-50 at the paper's R = 500 (its own result files, so tables never mix R)
SETTINGS = {"twonn-50": ("twonn", 50, 100), "twonn-100": ("twonn", 100, 100),
            "twocnn-50": ("twocnn", 50, 100), "twonn-50-r500": ("twonn", 50, 500)}
DEFAULT_SETTING = "twonn-50"
MODEL_NAMES = {"twonn": "TwoNN", "twocnn": "TwoCNN"}


def result_name(setting: str) -> str:
    """``baselines`` for the issue's setting (other benchmarks read it), else with a suffix."""
    return "baselines" if setting == DEFAULT_SETTING else f"baselines_{setting.replace('-', '_')}"


def setting_title(setting: str, rounds: int) -> str:
    """Plot and page title of a setting run for ``rounds`` rounds."""
    model, clients, _ = SETTINGS[setting]
    return f"{clients} clients, {MODEL_NAMES[model]}, R={rounds}"


def config(method: str, rounds: int, setting: str = DEFAULT_SETTING, seed: int = 0) -> SimConfig:
    """The SuPerFed pathological non-IID setting on FMNIST for one method (paper defaults)."""
    model, clients, _ = SETTINGS[setting]
    return SimConfig(
        seed=seed, rounds=rounds, eval_interval=max(10, rounds // 10), checkpoint_interval=rounds,
        data=DataConfig(dataset="fmnist", kind="shards", num_clients=clients, shards_per_client=2,
                        test_fraction=0.2),
        model=ModelConfig(model), algorithm=AlgorithmConfig(method),
        training=TrainingConfig(clients_per_round=5, epochs=10, batch_size=10, lr=0.01,
                                lr_decay=0.99, momentum=0.9, weight_decay=1e-4),
    )


def row_from_summary(summary: dict[str, float], rounds: int, seconds: float,
                     diverged: int = 0) -> dict[str, Any]:
    """The shape other benchmarks (SuPerFed) read: one row per method; ``diverged``: client
    fits dropped for non-finite weights (:func:`diverged_fits`)."""
    return {"top1_mean": summary["own_top1_mean"], "top1_std": summary["own_top1_std"],
            "ece_mean": summary["own_ece_mean"], "mce_mean": summary["own_mce_mean"],
            "rounds": rounds, "seconds": round(seconds, 1), "diverged": diverged}


def diverged_fits(run_dir: Path, final: dict[str, Any] | None = None) -> int:
    """How many client fits of a run diverged and were dropped: metrics.jsonl's ``diverged``
    rounds, plus the post-federation stages ``final`` (the final evaluation) lists."""
    lines = RunDir(run_dir).metrics.read_text().splitlines()
    fits = sum(len(json.loads(line).get("diverged", [])) for line in lines if line.strip())
    return fits + len((final or {}).get("diverged", []))


def cost_note(rows: dict[str, Any]) -> str:
    """Per-round wall time of each row's own run. No ratios: merged rows ran at other loads."""
    timed = [f"{LABELS.get(m, m)} {r['seconds'] / r['rounds']:.2f} s" for m, r in rows.items()
             if r.get("seconds") and r.get("rounds")]
    return ("Wall time per round of each method's own run (its seconds / rounds, evaluations "
            "included; rows of separate invocations ran under other loads): " + ", ".join(timed)
            + ".\n\n") if timed else ""


def page(results: dict[str, Any], name: str, setting: str, kept_plot: str = "") -> str:
    """The results page of a results payload; its timings come from its rows (cost_note)."""
    rows, rounds = results["rows"], results["rounds"]
    return ("# Baselines: FMNIST pathological non-IID (2 shards/client), "
            f"{setting_title(setting, rounds)}\n\n"
            f"Command: `{results['command']}` (`make bench-baselines`; ROUNDS={rounds}, "
            f"{results['threads']} torch thread).\n5 clients/round, E=10, B=10, lr 0.01 x "
            "0.99^round, SGD m=0.9, wd 1e-4; "
            "each client's own test split = 20% of its rows. Numbers after the LAST round; "
            "personalized model of each method on each client's own test split; ECE/MCE "
            "with 15 bins, mean over clients. FedAvg = the FedAvg+FT run's global model "
            f"before fine-tuning (identical training). Curve: {name}_curve.png.\n\n"
            + cost_note(rows) + results["table"] + reduced_note(rows, rounds, name)
            + "".join(f"\n{LABELS[m]}: run on its own after the other rows (`{c}`).\n"
                      for m, c in results.get("reruns", {}).items()) + kept_plot)


def fedavg_row(run_dir: Path, rounds: int) -> dict[str, Any]:
    """FedAvg = the fedavg_ft run's final global model on every client's own test split."""
    files = RunDir(run_dir)
    federation, algorithm = build_run(files.config())
    model = algorithm.inference.global_model(load_state(files.latest))
    reports = [evaluate_client(model, client, None, federation.spec.num_classes)
               for client in federation.clients.values()]
    return row_from_summary(summarize(reports), rounds, 0.0, diverged_fits(run_dir))


def curve_points(run_dir: str) -> list[list[float]] | None:
    """(round, personalized top-1) of every evaluated round of a run; None if it is gone."""
    metrics = RunDir(run_dir).metrics
    if not metrics.is_file():
        return None
    points = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [[p["round"] + 1, p["personal_top1"]] for p in points if "personal_top1" in p]


def curve(curves: dict[str, list[list[float]]], path: Path, title: str) -> None:
    """Personalized accuracy (own test, mean over clients) per evaluated round, every method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for method, pts in curves.items():
        if pts:
            xs, ys = zip(*pts, strict=True)
            label = "FedAvg (global model)" if method == "fedavg_ft" else LABELS[method]
            ax.plot(xs, ys, label=label)
    ax.set(xlabel="round", ylabel="top-1, clients' own test (mean)",
           title=f"FMNIST pathological non-IID, {title}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(rows: dict[str, Any]) -> str:
    """The markdown table: every method with a row, paper's nine marked."""
    lines = ["| method | in SuPerFed tables | top-1 own test (mean +- std) | ECE | MCE | "
             "last round | diverged fits |", "|---|---|---|---|---|---|---|"]
    for method, r in rows.items():
        lines.append(
            f"| {LABELS.get(method, method)} | {'yes' if method in PAPER_NINE else 'no'} | "
            f"{pct(r['top1_mean'])} +- {pct(r['top1_std'])} | {r['ece_mean']:.3f} | "
            f"{r['mce_mean']:.3f} | {r['rounds']} | {r.get('diverged', '-')} |"
        )
    return "\n".join(lines) + "\n"


def seconds_left(deadline: str | None) -> float | None:
    """Seconds until HH:MM UTC today (or tomorrow, if that time has passed), or None."""
    if not deadline:
        return None
    now = datetime.now(UTC)
    hour, minute = map(int, deadline.split(":"))
    target = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if target < now - timedelta(hours=12):
        target += timedelta(days=1)
    return (target - now).total_seconds()


def plan_rounds(method: str, planned: dict[str, int], remaining: list[str],
                left: float | None, unit: float) -> int:
    """The method's rounds: as planned, or scaled down with the rest to fit ``left`` seconds."""
    if left is None:
        return planned[method]
    need = unit * sum(COST[m] * planned[m] for m in remaining)
    scale = min(1.0, max(left, 0.0) / need) if need > 0 else 1.0
    return max(10, int(planned[method] * scale))


def reduced_note(rows: dict[str, Any], rounds: int, name: str) -> str:
    """Say which methods ran fewer rounds than asked, and why."""
    short = [f"{LABELS.get(m, m)} ({r['rounds']})" for m, r in rows.items()
             if r["rounds"] < rounds]
    if not short:
        return ""
    return ("\nFewer than " + str(rounds) + " rounds: " + ", ".join(short) + ". The machine "
            "(2 cores) was shared with other benchmarks and test runs, so each method's rounds "
            f"were scaled to finish by a deadline (DEADLINE); {name}_curve.png shows how "
            "the personalized accuracy evolves with rounds.\n")


def main() -> None:
    threads = set_threads()
    wanted = subset("METHODS", list(RUN_ORDER))
    setting = os.environ.get("SETTING", DEFAULT_SETTING)
    if setting not in SETTINGS:
        raise SystemExit(f"unknown SETTING {setting!r}; choose from {', '.join(SETTINGS)}")
    rounds = int(os.environ.get("ROUNDS", SETTINGS[setting][2]))
    name = result_name(setting)
    json_path = RESULTS / f"{name}.json"
    planned = {m: int(os.environ.get(f"ROUNDS_{m.upper()}", rounds)) for m in wanted}
    unit = 6.0  # seconds per FedAvg-round; re-estimated from each finished method
    for i, method in enumerate(wanted):
        started = time.perf_counter()
        method_rounds = plan_rounds(method, planned, wanted[i:],
                                    seconds_left(os.environ.get("DEADLINE")), unit)
        print(f"{method}: {method_rounds} rounds", flush=True)
        new_rows: dict[str, Any] = {}
        try:
            result = run(config(method, method_rounds, setting),
                         f"{name}-{method}-r{method_rounds}")
        except DivergedModel as err:  # NaN outputs at the final evaluation: "diverged"
            why: str | None = f"diverged within {method_rounds} rounds ({err})"
        else:
            why = None
            summary = result["final"]["clients"]["summary"]
            new_rows[method] = row_from_summary(summary, result["final"]["rounds"],
                                                time.perf_counter() - started,
                                                diverged_fits(Path(result["run_dir"]),
                                                              result["final"]))
            unit = (time.perf_counter() - started) / (COST[method] * method_rounds)
            if method == "fedavg_ft":
                new_rows["fedavg"] = fedavg_row(Path(result["run_dir"]),
                                                result["final"]["rounds"])
        # merge into the stored rows as they are NOW: other subsets may run at the same time
        stored = json.loads(json_path.read_text()) if json_path.is_file() else {}
        rows: dict[str, Any] = dict(stored.get("rows", {})) | new_rows
        runs: dict[str, str] = dict(stored.get("runs", {}))
        failed: dict[str, str] = dict(stored.get("failed", {}))
        if why is None:
            failed.pop(method, None)
            runs[method] = result["run_dir"]
        else:
            failed[method] = why
            rows.pop(method, None)
        order = ("fedavg", *RUN_ORDER)
        rows = {m: rows[m] for m in order if m in rows} | {m: r for m, r in rows.items()
                                                            if m not in order}
        text = table(rows) + "".join(f"\n{LABELS[m]}: {why}\n" for m, why in failed.items())
        # per-round points are kept in the results: run directories under /tmp do not last
        curves = dict(stored.get("curves", {}))
        if why is None:
            curves[method] = curve_points(result["run_dir"])
        for m, run_dir in runs.items():
            curves[m] = curves.get(m) or curve_points(run_dir)
        gone = [LABELS[m] for m in runs if not curves[m]]
        kept_plot = (f"\n{name}_curve.png does not show {LABELS[method]}: it was not redrawn, "
                     f"since the per-round points of {', '.join(gone)} were not kept.\n"
                     if gone else "")  # redrawing would drop them: keep the plot as it is
        if not gone:
            curve(curves, RESULTS / f"{name}_curve.png", setting_title(setting, rounds))
        given = [f"SETTING={setting}"] * (setting != DEFAULT_SETTING) + [
            f"ROUNDS={os.environ['ROUNDS']}"] * bool(os.environ.get("ROUNDS"))
        command = " ".join(["cd benchmarks &&", *given, "../.venv/bin/python bench_baselines.py"])
        reruns = dict(stored.get("reruns", {}))
        if why is None and os.environ.get("METHODS"):
            reruns[method] = command.replace("&& ", f"&& METHODS={method} ", 1)
        elif why is None:
            reruns.pop(method, None)
        results = {"rounds": rounds, "threads": threads, "command": command,
                   "setting": config("fedavg", rounds, setting).to_toml(), "rows": rows,
                   "runs": runs, "curves": curves, "failed": failed, "reruns": reruns,
                   "paper_nine": list(PAPER_NINE), "table": text}
        save(name, results)
        (RESULTS / f"{name}.md").write_text(page(results, name, setting, kept_plot))
        print(text, flush=True)


if __name__ == "__main__":
    main()
