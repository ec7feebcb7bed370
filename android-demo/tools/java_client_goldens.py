"""Golden files for the Java federated client's host tests (android-demo/core, FlServerTest).

The host JVM has no ExecuTorch native library, so the Java clients cannot train. Instead this
script computes, with pflkit's own algorithm, what each client of a small SuPerFed run would
send in round 0, and writes it as safetensors for the Java test's trainer:

    OUT/run.toml                   the run pfl-server is started with
    OUT/global0.safetensors        the round-0 global state (as pfl-server creates it)
    OUT/client<i>.safetensors      client i's round-0 fit: its update minus global0 under
                                   ``delta/<name>``, its new private state under ``state/<name>``,
                                   metadata ``num_samples``

The Java trainer adds the delta to the global state it downloaded, so the upload depends on
the download, and keeps ``state/`` as the device's private state. Run by the Java test itself
(seconds; ``--out DIR``); nothing here is committed.
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

import torch

from pflkit.sdk.algorithms.base import RoundContext
from pflkit.sdk.builder import build_run
from pflkit.sdk.run_config import SimConfig
from pflkit.sdk.tensorio import save_state

RUN_TOML = """\
seed = 0
rounds = 2
eval_interval = 2
[data]
dataset = "synthetic"
resize = 8
kind = "iid"
num_clients = 3
[model]
name = "twonn"
[algorithm]
name = "superfed_mm"
[algorithm.params]
[training]
clients_per_round = 3
epochs = 1
batch_size = 50
lr = 0.05
momentum = 0.5
"""


def write_goldens(out: Path) -> None:
    """Write run.toml, global0 and each client's round-0 delta and private state."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "run.toml").write_text(RUN_TOML)
    config = SimConfig.from_mapping(tomllib.loads(RUN_TOML))
    federation, algorithm = build_run(config)
    global0 = algorithm.aggregation.init_global(config.seed)
    save_state(out / "global0.safetensors", global0)
    for cid, client in sorted(federation.clients.items()):
        ctx = RoundContext(0, config.rounds, config.training.lr_schedule.at(0), config.seed,
                           cid)
        state = algorithm.training.init_client(cid, config.seed, client.train)
        result = algorithm.training.fit(global0, state, client.train, ctx)
        tensors = {f"delta/{k}": (v - global0[k]) if v.is_floating_point() else v
                   for k, v in result.update.items()}
        tensors.update({f"state/{k}": v for k, v in result.client_state.tensors.items()})
        save_state(out / f"client{cid}.safetensors",
                   {k: v.to(torch.float32) if v.is_floating_point() else v
                    for k, v in tensors.items()},
                   {"num_samples": str(result.num_samples)})


def main() -> None:
    """Parse --out and write the goldens."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    write_goldens(parser.parse_args().out)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
