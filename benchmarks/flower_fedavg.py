"""Flower 1.42 simulation of bench-scale's FedAvg workload (run by bench_scale.py in its own venv).

Flower is not a pflkit dependency: ``make bench-scale`` creates ``benchmarks/.venv-flower`` with
``flwr[simulation]`` and lets that interpreter see this checkout's packages (torch, pflkit) for
the SAME model (pflkit's registry), the SAME partition (pflkit's seeded Dirichlet split) and
the same hyperparameters. The client is the plain PyTorch loop a Flower user writes (the
quickstart's shape: load weights, SGD for E epochs, send weights); the server is Flower's own
FedAvg strategy on its Ray backend with one CPU (one torch thread) per client actor.

    PYTHONPATH=benchmarks .venv-flower/bin/python flower_fedavg.py OUT.json ROUNDS WORKERS
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation
from scale_workloads import fedavg_config

from pflkit.sdk.data.datasets import load_dataset
from pflkit.sdk.data.federation import build_federation
from pflkit.sdk.metrics import predict, top_k_accuracy
from pflkit.sdk.models import build_model
from pflkit.sdk.seeding import torch_generator

SEED = 0
CLIENTS, PER_ROUND, EPOCHS, BATCH = 100, 20, 5, 40
LR, DECAY, MOMENTUM, WD = 0.01, 0.99, 0.9, 1e-5
MODEL = "fedrod_convnet"

_cache: dict[str, Any] = {}


def federation() -> Any:
    """pflkit's seeded Dirichlet(0.3) federation, loaded once per worker process."""
    if "federation" not in _cache:
        cfg = fedavg_config()
        dataset = load_dataset(cfg.data.dataset, cfg.data.root, seed=cfg.seed)
        _cache["spec"] = dataset.spec
        _cache["federation"] = build_federation(dataset, cfg.data.partition, cfg.seed)
    return _cache["federation"]


def new_model() -> torch.nn.Module:
    fed = federation()
    return build_model(MODEL, fed.spec.input_shape, fed.spec.num_classes)


client = ClientApp()


@client.train()
def train(msg: Message, context: Context) -> Message:
    """E epochs of SGD from the received weights on this node's partition."""
    torch.set_num_threads(1)
    cid = int(context.node_config["partition-id"])
    data = federation().clients[cid].train
    round_index = int(msg.content["config"]["server-round"]) - 1
    model = new_model()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=LR * DECAY**round_index, momentum=MOMENTUM,
                          weight_decay=WD)
    gen = torch_generator(SEED, "flower", cid, round_index)
    for _ in range(EPOCHS):
        for xb, yb in data.batches(BATCH, gen):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord({"num-examples": len(data)})})
    return Message(content=content, reply_to=msg)


def main() -> None:
    out, rounds, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    marks: list[tuple[float, float]] = []  # (round end, next round start) per server round
    final: dict[str, float] = {}

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        ended = time.perf_counter()
        if server_round == rounds:
            model = new_model()
            model.load_state_dict(arrays.to_torch_state_dict())
            test = federation().test
            final["top1"] = top_k_accuracy(predict(model, test), test.y, 1)
        marks.append((ended, time.perf_counter()))
        return None

    server = ServerApp()

    @server.main()
    def run(grid: Grid, context: Context) -> None:
        strategy = FedAvg(fraction_train=PER_ROUND / CLIENTS, fraction_evaluate=0.0,
                          min_available_nodes=CLIENTS)
        strategy.start(grid=grid, initial_arrays=ArrayRecord(new_model().state_dict()),
                       num_rounds=rounds, train_config=ConfigRecord({}), evaluate_fn=evaluate)

    torch.set_num_threads(1)
    import flower_fedavg  # the client app by module name: workers import it, not __main__

    run_simulation(server_app=server, client_app=flower_fedavg.client, num_supernodes=CLIENTS,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": workers}})
    seconds = [marks[i][0] - marks[i - 1][1] for i in range(1, len(marks))]
    with open(out, "w") as handle:
        json.dump({"round_seconds": seconds, "top1": final.get("top1"), "workers": workers,
                   "flwr": __import__("flwr").__version__}, handle)


if __name__ == "__main__":
    main()
