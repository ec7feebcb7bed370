"""Flower 1.42 simulation of bench-scale's FedAvg workload (run by bench_scale.py in its own venv).

Flower is not a pflkit dependency: ``make bench-scale`` creates ``benchmarks/.venv-flower`` with
``flwr[simulation]`` and lets that interpreter see this checkout's packages (torch, pflkit).
The comparison is only fair if both frameworks do the same work, so the parent process
(bench_scale.py) hands over a plan written with pflkit's own code: the client ids pflkit's
coordinator samples in each round and the initial global weights. Flower then trains those
clients from those weights, on the simulator's partition, with the simulator's learning-rate
schedule and each client's batch order drawn from pflkit's per-(seed, round, client) stream;
the top-1 it reports must match pflkit's (Flower aggregates in float32, in arrival order: equal
up to rounding). The client is the plain PyTorch loop a Flower user writes (the quickstart's
shape: load weights, SGD for E epochs, send weights); the server is Flower's own FedAvg on its
Ray backend with one CPU (one torch thread) per client actor; only its node sampling is
replaced (Flower draws nodes with ``random.sample``).

    PYTHONPATH=benchmarks .venv-flower/bin/python flower_fedavg.py OUT.json PLAN_DIR WORKERS

PLAN_DIR holds ``plan.json`` (``{"clients": [[ids of round 0], ...]}``) and
``initial.safetensors``; the rounds run are the plan's rounds.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.serverapp.strategy.strategy_utils import sample_nodes
from flwr.simulation import run_simulation
from scale_workloads import fedavg_config

from pflkit.sdk.algorithms.base import RoundContext
from pflkit.sdk.builder import load_data, partition_of
from pflkit.sdk.metrics import predict, top_k_accuracy
from pflkit.sdk.models import build_model
from pflkit.sdk.tensorio import load_state

CONFIG = fedavg_config()
_cache: dict[str, Any] = {}


def federation() -> Any:
    """The simulator's federation (same loader and partition code), built once per process."""
    if "federation" not in _cache:
        dataset = load_data(CONFIG)
        _cache["federation"] = partition_of(CONFIG, dataset).federation(dataset)
    return _cache["federation"]


def new_model() -> torch.nn.Module:
    fed = federation()
    return build_model(CONFIG.model.name, fed.spec.input_shape, fed.spec.num_classes)


client = ClientApp()


@client.query()
def partition(msg: Message, context: Context) -> Message:
    """This node's partition id: the server maps pflkit's client ids to Flower's node ids."""
    content = RecordDict({"node": ConfigRecord({"partition": int(context.node_config[
        "partition-id"])})})
    return Message(content=content, reply_to=msg)


@client.train()
def train(msg: Message, context: Context) -> Message:
    """E epochs of SGD from the received weights on this node's partition."""
    torch.set_num_threads(1)
    cid = int(context.node_config["partition-id"])
    data = federation().clients[cid].train
    round_index = int(msg.content["config"]["server-round"]) - 1
    t, lr = CONFIG.training, CONFIG.schedule().lr_at(round_index)
    model = new_model()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=t.momentum,
                          weight_decay=t.weight_decay)
    # the batch order pflkit's clients draw: the stream of (seed, round, client, "batches")
    gen = RoundContext(round_index, CONFIG.rounds, lr, CONFIG.seed, cid).generator("batches")
    for _ in range(t.epochs):
        for xb, yb in data.batches(t.batch_size, gen):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord({"num-examples": len(data)})})
    return Message(content=content, reply_to=msg)


class PlannedFedAvg(FedAvg):
    """Flower's FedAvg, training in each round the nodes of the clients the plan names."""

    def __init__(self, plan: list[list[int]], node_of: dict[int, int]) -> None:
        super().__init__(fraction_evaluate=0.0, min_available_nodes=len(node_of))
        self.plan, self.node_of = plan, node_of

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        config["server-round"] = server_round
        record = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: config})
        nodes = [self.node_of[cid] for cid in self.plan[server_round - 1]]
        return self._construct_messages(record, nodes, MessageType.TRAIN)


def node_ids(grid: Grid, clients: int) -> dict[int, int]:
    """pflkit client id (Flower's partition id) -> Flower node id, asked once of every node."""
    _, nodes = sample_nodes(grid, clients, 0)  # waits until every node is connected
    asked = [Message(content=RecordDict({}), dst_node_id=node, message_type=MessageType.QUERY)
             for node in nodes]
    return {int(reply.content["node"]["partition"]): reply.metadata.src_node_id
            for reply in grid.send_and_receive(asked)}


def main() -> None:
    out, plan_dir, workers = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    plan = json.loads((plan_dir / "plan.json").read_text())["clients"]
    rounds, clients = len(plan), CONFIG.data.num_clients
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
        strategy = PlannedFedAvg(plan, node_ids(grid, clients))  # before the first timed mark
        initial = ArrayRecord(load_state(plan_dir / "initial.safetensors"))
        strategy.start(grid=grid, initial_arrays=initial, num_rounds=rounds,
                       train_config=ConfigRecord({}), evaluate_fn=evaluate)

    torch.set_num_threads(1)
    import flower_fedavg  # the client app by module name: workers import it, not __main__

    run_simulation(server_app=server, client_app=flower_fedavg.client, num_supernodes=clients,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": workers}})
    seconds = [marks[i][0] - marks[i - 1][1] for i in range(1, len(marks))]
    with open(out, "w") as handle:
        json.dump({"round_seconds": seconds, "top1": final.get("top1"), "workers": workers,
                   "flwr": __import__("flwr").__version__}, handle)


if __name__ == "__main__":
    main()
