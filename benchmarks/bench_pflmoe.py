"""bench-pflmoe: PFL-MoE Tables I-II, Fashion-MNIST (32x32) + LeNet-5, 100 clients, Dir(alpha).

Settings (section V.A.4): FedAvg lr 0.01 (constant), momentum 0.5, B=10, E=5, 10% of the
clients per round; personalization SGD m=0.9, wd 5e-4, classifier lr 0.001, gate lr 0.001
(paper: SGD), D_gate = 1/4 of each client's rows, stage-2 batch 64 (public code). Rows:
local-only, FedAvg, PFL-FB, PFL-MF, PFL-MFE; "local test" = client-class-weighted accuracy on
the global test set, "global test" = plain accuracy on it; means over the 100 clients.

Budget (CPU for all runs together ~80 single-core minutes) forces fewer FedAvg rounds than the
paper's 1000: ROUNDS (default 200) per alpha. PER_EPOCHS: stage-2 epochs (default 200, the
paper's; cheap, only the heads train). One FedAvg run per alpha; FB, MF and MFE all start
from its LAST global model and the same client states (split seeds). PFL-FB's classifier is
taken from the PFL-MF state: the classifier passes never read the gate, so the three variants'
classifiers are bit-identical (tests/sdk/algorithms/test_pflmoe.py checks it). The frozen
extractor is shared by every client, so the global test set's activations are computed once
and each client's model is scored with ``GatedExperts.head_logits`` (checked against the full
forward on client 0). Local-only: 3 x LOCAL_EPOCHS epochs (default 5) at lr 0.1, 0.01, 0.001
(the paper's 300-epoch step schedule, compressed), B=64, SGD m=0.9, wd 5e-4, scored on a
seeded 2000-image subset of the global test set (100 separate extractors are the cost).

    make bench-pflmoe       (env: ROUNDS, PER_EPOCHS, LOCAL_EPOCHS, ALPHAS="0.5,0.9,2")

REUSE=<results name> resumes that run's finished FedAvg run directories and copies its curves
and local-only rows, so only stage 2 runs (e.g. other stage-2 epochs); with EXTEND=1 the FedAvg
runs first train on to ROUNDS (e.g. 100 -> 200). OUT names the results.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from common import RESULTS, RUNS, pct, save, set_threads
from pflmoe_report import PAPER, plot, table

from pflkit.sdk.algorithms import Algorithm, ClientState, RoundContext, State, make_algorithm
from pflkit.sdk.algorithms.pflmoe import PERSONAL
from pflkit.sdk.data.federation import Federation
from pflkit.sdk.evaluation import evaluate_client
from pflkit.sdk.metrics import class_weighted_accuracy, predict, top_k_accuracy
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.rundir import RunDir
from pflkit.sdk.seeding import torch_generator
from pflkit.server.simulator import Simulation

EVAL_EVERY = 5


def config(alpha: float, rounds: int, seed: int = 0) -> SimConfig:
    """Stage 1 (FedAvg) as PFL-MoE runs it: V.A.4 b."""
    return SimConfig(
        seed=seed, rounds=rounds, eval_interval=rounds, checkpoint_interval=rounds,
        data=DataConfig(dataset="fmnist", resize=32, kind="dirichlet", num_clients=100,
                        alpha=alpha),
        model=ModelConfig("lenet5"), algorithm=AlgorithmConfig("pflmoe", {"variant": "mfe"}),
        training=TrainingConfig(fraction=0.1, epochs=5, batch_size=10, lr=0.01, lr_decay=1.0,
                                momentum=0.5, weight_decay=0.0),
    )


def local_config(alpha: float, epochs: int, seed: int = 0) -> SimConfig:
    """Local-only: every client every round, lr 0.1 -> 0.01 -> 0.001 (V.A.4 a, compressed)."""
    return SimConfig(
        seed=seed, rounds=3, eval_interval=3, checkpoint_interval=3,
        data=DataConfig(dataset="fmnist", resize=32, kind="dirichlet", num_clients=100,
                        alpha=alpha),
        model=ModelConfig("lenet5"), algorithm=AlgorithmConfig("local"),
        training=TrainingConfig(fraction=1.0, epochs=epochs, batch_size=64, lr=0.1,
                                lr_decay=0.1, momentum=0.9, weight_decay=5e-4),
    )


def scores(logits: torch.Tensor, y: torch.Tensor, counts: torch.Tensor) -> tuple[float, float]:
    """(local test, global test) of one client's logits on the global test set."""
    return class_weighted_accuracy(logits.argmax(1), y, counts), top_k_accuracy(logits, y, 1)


def mean_pair(pairs: list[tuple[float, float]]) -> dict[str, float]:
    n = len(pairs)
    return {"local_test": sum(p[0] for p in pairs) / n, "global_test": sum(p[1] for p in pairs) / n}


def stage_one(sim: Simulation, counts: dict[int, torch.Tensor],
              deadline: float = math.inf) -> list[dict[str, float]]:
    """Run the FedAvg rounds; every EVAL_EVERY rounds score the global model (the curve).

    ``deadline`` (``time.monotonic()``): stop after the round that reaches it, scored; the
    constant lr makes the stopped run the run of that many rounds.
    """
    test, curve = sim.federation.test, []
    while not sim.coordinator.finished:
        row = sim.run_round()
        done = row["round"] + 1
        last = sim.coordinator.finished or time.monotonic() >= deadline
        if done % EVAL_EVERY == 0 or last:
            global_model = sim.algorithm.inference.global_model(sim.coordinator.global_state)
            logits = predict(global_model, test)
            local = [class_weighted_accuracy(logits.argmax(1), test.y, c) for c in counts.values()]
            curve.append({"round": done, "global_test": top_k_accuracy(logits, test.y, 1),
                          "local_test": sum(local) / len(local), "train_loss": row["train_loss"]})
            print(f"  round {done}: global {pct(curve[-1]['global_test'])} "
                  f"local {pct(curve[-1]['local_test'])}", flush=True)
        if last:
            break
    return curve


Pairs = dict[str, list[tuple[float, float]]]  # method -> per-client (local, global test)


def stage_two(sim: Simulation, per_epochs: int) -> dict[str, dict[str, float]]:
    """PFL-FB / -MF / -MFE for every client from the final global model; FedAvg alongside."""
    pairs = personalize(sim.algorithm, sim.federation, sim.coordinator.global_state,
                        list(sim.federation.clients), per_epochs,
                        lambda cid: sim.context(cid, sim.config.rounds), sim.client_state)
    return {k: mean_pair(v) for k, v in pairs.items()}


def personalize(algorithm: Algorithm, fed: Federation, state: State, client_ids: list[int],
                per_epochs: int, context: Callable[[int], RoundContext],
                client_state: Callable[[int], ClientState]) -> Pairs:
    """Stage 2 of ``client_ids`` and the per-client scores of FedAvg, FB, MF and MFE."""
    test, spec = fed.test, fed.spec
    base = algorithm.inference.global_model(state)
    with torch.no_grad():
        a_test = base.body(test.x)  # (10000, 400): the frozen extractor, shared by all
        global_logits = base.head(a_test)
    algos = {v: make_algorithm("pflmoe", algorithm.model_factory, algorithm.local,
                               {"variant": v, "epochs": per_epochs}) for v in ("fb", "mf", "mfe")}
    pairs: Pairs = {k: [] for k in ("fedavg", "fb", "mf", "mfe")}
    started = time.perf_counter()
    for i, cid in enumerate(client_ids):
        client = fed.clients[cid]
        counts = client.class_counts(spec.num_classes)
        pairs["fedavg"].append(scores(global_logits, test.y, counts))
        for variant in ("mf", "mfe"):
            cstate = algos[variant].personalization.personalize(state, client_state(cid),
                                                                client.train, context(cid))
            model = algos[variant].inference.personalized_model(state, cstate)
            with torch.no_grad():
                logits = model.head_logits(test.x, a_test)
            pairs[variant].append(scores(logits, test.y, counts))
            if i == 0:  # the cached-activation path equals the plain forward
                full = evaluate_client(model, client, test, spec.num_classes)
                assert abs(full.class_weighted - pairs[variant][-1][0]) < 1e-6
                assert abs(full.global_plain - pairs[variant][-1][1]) < 1e-6
            if variant == "mf":
                fb_state = ClientState({k: v for k, v in cstate.tensors.items()
                                        if k.startswith(PERSONAL)},
                                       {**cstate.meta, "variant": "fb"})
                fb = algos["fb"].inference.personalized_model(state, fb_state)
                with torch.no_grad():
                    pairs["fb"].append(scores(fb.head(a_test), test.y, counts))
        if (i + 1) % 10 == 0:
            print(f"  stage 2: {i + 1}/{len(client_ids)} clients, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
    return pairs


def local_only(alpha: float, epochs: int) -> dict[str, float]:
    """Each client trains LeNet-5 alone; scored on a seeded subset of the global test set."""
    sim = Simulation(local_config(alpha, epochs), fresh(RUNS / f"pflmoe-local-dir{alpha:g}"),
                     progress=False)
    while not sim.coordinator.finished:
        sim.run_round()
    fed = sim.federation
    subset = fed.test.subset(torch.randperm(len(fed.test), generator=torch_generator(0, "sub"))
                             [:2000])
    pairs = []
    for cid, client in fed.clients.items():
        model = sim.algorithm.inference.personalized_model(sim.coordinator.global_state,
                                                           sim.client_state(cid))
        pairs.append(scores(predict(model, subset), subset.y,
                            client.class_counts(fed.spec.num_classes)))
    return mean_pair(pairs)


def fresh(path: Path) -> Path:
    """An empty run directory (a re-run replaces the previous one)."""
    if path.exists():
        shutil.rmtree(path)
    return path


def stage_one_or_reuse(alpha: float, rounds: int, previous: dict[str, Any] | None,
                       extend: bool) -> tuple[Simulation, list[dict[str, float]]]:
    """Train FedAvg, or (REUSE) resume the finished run of ``previous`` and take its curve.

    ``extend``: train the reused run on from its last round to ``rounds``. The FedAvg stage
    uses a constant lr and samples clients from (seed, round), so this is exactly the
    ``rounds``-round run.
    """
    key, run_dir = f"{alpha:g}", RUNS / f"pflmoe-dir{alpha:g}"
    sim = Simulation(config(alpha, rounds), run_dir if previous else fresh(run_dir),
                     resume=previous is not None, progress=False)
    counts = {cid: c.class_counts(sim.federation.spec.num_classes)
              for cid, c in sim.federation.clients.items()}
    if previous is None:
        return sim, stage_one(sim, counts)
    if sim.coordinator.round != previous["rounds"] or (previous["rounds"] != rounds
                                                        and not extend):
        raise SystemExit(f"REUSE: {run_dir} does not hold a finished {previous['rounds']}-round "
                         f"run (or set EXTEND=1 to train it on to {rounds} rounds)")
    RunDir(run_dir).config_file.write_text(config(alpha, rounds).to_toml())
    return sim, previous["curves"][key] + stage_one(sim, counts)


def main() -> None:
    threads = set_threads()
    rounds = int(os.environ.get("ROUNDS", "200"))
    per_epochs = int(os.environ.get("PER_EPOCHS", "200"))
    local_epochs = int(os.environ.get("LOCAL_EPOCHS", "5"))
    alphas = [float(a) for a in os.environ.get("ALPHAS", "0.5,0.9,2").split(",")]
    reuse = os.environ.get("REUSE")  # a results name: keep its FedAvg runs and local-only rows
    extend = os.environ.get("EXTEND") == "1"  # with REUSE: train those runs on to ROUNDS
    name = os.environ.get("OUT", "pflmoe")
    previous = json.loads((RESULTS / f"{reuse}.json").read_text()) if reuse else None
    results: dict[str, Any] = {}
    curves: dict[str, list[dict[str, float]]] = {}
    seconds: dict[str, float] = {}
    command = (f"cd benchmarks && ROUNDS={rounds} PER_EPOCHS={per_epochs} "
               f"LOCAL_EPOCHS={local_epochs} {f'REUSE={reuse} ' if reuse else ''}"
               f"{'EXTEND=1 ' if extend else ''}"
               f"{f'OUT={name} ' if name != 'pflmoe' else ''}../.venv/bin/python bench_pflmoe.py")
    for alpha in alphas:
        key = f"{alpha:g}"
        started = time.perf_counter()
        print(f"alpha {key}: FedAvg, {rounds} rounds{' (reused)' if reuse else ''}", flush=True)
        sim, curves[key] = stage_one_or_reuse(alpha, rounds, previous, extend)
        seconds[f"{key}/fedavg"] = time.perf_counter() - started
        print(f"alpha {key}: stage 2, {per_epochs} epochs", flush=True)
        results[key] = stage_two(sim, per_epochs)
        seconds[f"{key}/stage2"] = time.perf_counter() - started - seconds[f"{key}/fedavg"]
        if previous is None:
            print(f"alpha {key}: local-only", flush=True)
            results[key]["local"] = local_only(alpha, local_epochs)
        else:
            results[key]["local"] = previous["results"][key]["local"]
        seconds[f"{key}/total"] = time.perf_counter() - started
        md = table(results, rounds, per_epochs, local_epochs, name)
        if reuse:
            md += (f"FedAvg runs and local-only rows reused from `{reuse}` "
                   f"(`{previous['command']}`); "
                   + (f"the FedAvg runs were trained on from round {previous['rounds']} to "
                      f"{rounds}, then stage 2 ran.\n" if extend else "only stage 2 ran here.\n"))
        print(md, flush=True)
        (RESULTS / f"{name}.md").write_text(f"# bench-pflmoe\n\nCommand: `{command}`\n\n{md}")
        save(name, {"rounds": rounds, "per_epochs": per_epochs, "local_epochs": local_epochs,
                    "threads": threads, "command": command, "reused": reuse, "results": results,
                    "curves": curves, "seconds": seconds, "paper": PAPER, "table": md})
        plot(curves, name)


if __name__ == "__main__":
    main()
