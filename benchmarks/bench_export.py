"""bench-export: latency and size of exported personalized models vs eager PyTorch.

Per method, a short pfl-sim run on Fashion-MNIST (20 clients, Dir(0.3), 5 per round, E=1;
FedRoD ConvNet, TwoNN for SuPerFed), then ``export_model`` of client 17 to ONNX and
ExecuTorch (XNNPACK), fp32 and int8 (PTQ on the client's train rows, accuracy drop on its own
test split). Latency is the median of many single calls at batch 1 and 32 on real test rows,
everything on ONE thread (torch, onnxruntime intra-op, ExecuTorch's XNNPACK threadpool). The
runs are short because only the exported model's speed and its int8 accuracy drop are
measured here, not the methods' accuracy (their own benchmarks do that).

    make bench-export            (ROUNDS=5 by default; PFLKIT_THREADS=1)
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from common import RUNS, pct, save, set_threads

from pflkit.export import Choice, build_exportable, export_model, load_run_source
from pflkit.export.formats import FORMATS
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.rundir import RunDir
from pflkit.sdk.state_store import client_state_to_bytes
from pflkit.sdk.tensorio import atomic_write_bytes
from pflkit.server.simulator import Simulation

CLIENT = 17
TARGET_INT8_SPEEDUP = 1.5
# method label -> (algorithm, model, params, selections to export). SuPerFed uses the TwoNN
# of its paper's FMNIST setting (and its 12-way final evaluation stays cheap).
METHODS: dict[str, tuple[str, str, dict, dict[str, Choice]]] = {
    "FedAvg+FT": ("fedavg_ft", "fedrod_convnet", {"ft_epochs": 1},
                  {"personalized": Choice()}),
    "SuPerFed-MM": ("superfed_mm", "twonn", {},
                    {"lambda 0.3 (baked)": Choice({"lam": 0.3}),
                     "lambda runtime input": Choice({"lam": "runtime"})}),
    "FedRoD (hyper)": ("fedrod_hyper", "fedrod_convnet", {},
                       {"personalized + generic": Choice()}),
    "PFL-MFE": ("pflmoe", "fedrod_convnet", {"variant": "mfe", "epochs": 2},
                {"gated experts": Choice()}),
}


def config(algorithm: str, model: str, params: dict, rounds: int) -> SimConfig:
    """A short Fashion-MNIST run: 20 clients, Dir(0.3), 20% of each client's rows as its test."""
    return SimConfig(
        seed=0, rounds=rounds, eval_interval=rounds, checkpoint_interval=rounds,
        data=DataConfig(dataset="fmnist", kind="dirichlet", num_clients=20, alpha=0.3,
                        test_fraction=0.2),
        model=ModelConfig(model), algorithm=AlgorithmConfig(algorithm, params),
        training=TrainingConfig(clients_per_round=5, epochs=1, batch_size=40, lr=0.05,
                                lr_decay=0.99, momentum=0.9, weight_decay=1e-5),
    )


def train(config: SimConfig, name: str) -> tuple[Path, dict]:
    """Run the rounds, then the post-federation stage of the exported client only.

    The simulator's final evaluation (every client, every choice, the 10k global test set) is
    skipped: it is the costliest part of a short run and this benchmark does not use it.
    """
    run_dir = RUNS / name
    shutil.rmtree(run_dir, ignore_errors=True)
    started = time.perf_counter()
    sim = Simulation(config, run_dir, progress=False)
    row: dict = {}
    while not sim.coordinator.finished:
        row = sim.run_round()
    if sim.algorithm.personalization.has_stage:
        client = sim.federation.all_clients[CLIENT]
        state = sim.algorithm.personalization.personalize(
            sim.coordinator.global_state, sim.client_state(CLIENT), client.train,
            sim.context(CLIENT, config.rounds))
        atomic_write_bytes(RunDir(run_dir).personalized(CLIENT),
                           client_state_to_bytes(state))
    return run_dir, {"run_dir": str(run_dir), "seconds": time.perf_counter() - started,
                     "last_round": row}


def median_ms(call: Callable[[], object], batch: int) -> float:
    """Median wall time of one call, in milliseconds (after a warm-up)."""
    calls = 200 if batch == 1 else 40
    for _ in range(10):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def measure(label: str, selection: Choice, source, out: Path) -> dict:
    """Export one selection (fp32 + int8, both formats) and time every artifact."""
    result = export_model(source, selection, out, int8=True, force_int8=True, force=True)
    ex, _ = build_exportable(source, selection)
    rows = source.test.x
    row: dict = {"selection": label, "parity": result.card["parity"],
                 "bytes": {a["file"]: a["bytes"] for a in result.card["artifacts"]}}
    runners = {"eager": lambda feeds: ex.eager(*feeds)}
    for artifact in result.card["artifacts"]:
        runners[artifact["file"]] = FORMATS[artifact["format"]].load(out / artifact["file"], 1)
    with torch.no_grad():
        for batch in (1, 32):
            feeds = ex.feeds(rows[:batch])
            row[f"b{batch}"] = {name: median_ms(lambda r=r, f=feeds: r(f), batch)
                                for name, r in runners.items()}
    return row


def table(results: list[dict]) -> str:
    """The markdown table of measured numbers."""
    files = ["model.onnx", "model_int8.onnx", "model.pte", "model_int8.pte"]
    head = ("| method | export | batch | eager ms | ONNX fp32 | ONNX int8 | ET fp32 | ET int8 | "
            "fp32 / eager (ORT, ET) | int8 speed-up (ORT, ET) |\n|---|---|---|---|---|---|---|"
            "---|---|---|\n")
    lines = []
    for r in results:
        for batch in (1, 32):
            t = r[f"b{batch}"]
            ort, ort8, et, et8 = (t.get(f, float("nan")) for f in files)
            lines.append(
                f"| {r['method']} | {r['selection']} | {batch} | {t['eager']:.3f} | {ort:.3f} | "
                f"{ort8:.3f} | {et:.3f} | {et8:.3f} | {ort / t['eager']:.2f}, "
                f"{et / t['eager']:.2f} | {ort / ort8:.2f}x, {et / et8:.2f}x |")
    sizes = ["\n| method | export | ONNX fp32 KB | ONNX int8 KB | ET fp32 KB | ET int8 KB | "
             "client test top-1 eager | int8 top-1 ONNX / ET (change, points) |\n"
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        p = {e["file"]: e for e in r["parity"]}
        kb = " | ".join(f"{r['bytes'][f] / 1024:.0f}" if f in r["bytes"] else "n/a"
                        for f in files)
        drops = " / ".join(f"{pct(p[f]['test_top1_artifact'])} "
                           f"({-p[f]['accuracy_drop_points']:+.1f})" if f in p else "n/a"
                           for f in ("model_int8.onnx", "model_int8.pte"))
        sizes.append(f"| {r['method']} | {r['selection']} | {kb} | "
                     f"{pct(p['model.onnx']['test_top1_eager'])} "
                     f"({p['model.onnx']['test_rows']} rows) | {drops} |")
    return head + "\n".join(lines) + "\n" + "\n".join(sizes) + "\n"


def main() -> None:
    threads = set_threads()
    rounds = int(os.environ.get("ROUNDS", "5"))
    results, runs = [], {}
    for method, (algorithm, model, params, selections) in METHODS.items():
        run_dir, runs[method] = train(config(algorithm, model, params, rounds),
                                      f"export-{algorithm}-r{rounds}")
        source = load_run_source(run_dir, CLIENT)
        for label, selection in selections.items():
            out = RUNS / "exports" / f"{algorithm}-{'-'.join(label.split()[:2])}"
            results.append({"method": method, **measure(label, selection, source, out)})
            print(table(results[-1:]), flush=True)
    text = table(results)
    command = "cd benchmarks && ../.venv/bin/python bench_export.py"
    note = (f"Measured on one thread ({threads}), client {CLIENT}, {rounds} rounds per method "
            f"(a short run: this benchmark measures the exported model, not the method's "
            f"accuracy). Latency: median of single calls on real client test rows.\n")
    md = f"# bench-export\n\nCommand: `{command}` (`make bench-export`)\n\n{note}\n{text}"
    (Path(__file__).resolve().parent / "results" / "export.md").write_text(md)
    print(md)
    save("export", {"rounds": rounds, "client": CLIENT, "threads": threads, "runs": runs,
                    "results": results, "table": text, "command": command})


if __name__ == "__main__":
    main()
