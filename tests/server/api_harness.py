"""The API tests' server limits and the requests they share: auth, the open round, a snapshot."""

from __future__ import annotations

import httpx
import torch
from server_harness import Server

from pflkit.sdk.tensorio import state_from_bytes

LIMIT = 1_500_000  # bytes; a twonn update on 28x28 inputs is about 0.8 MB
MAX_SAMPLES = 1000  # the server's bound on an update's self-reported sample count


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def open_round(server: Server, secrets: dict[int, str]) -> dict:
    """The open round: run id, index, global state, sampled and unsampled clients' secrets."""
    while True:
        tasks = {cid: httpx.get(f"{server.url}/v1/task", headers=auth(s)).json()
                 for cid, s in secrets.items()}
        train = [cid for cid, t in tasks.items() if t["status"] == "train"]
        if len(train) == 2:
            task = tasks[train[0]]
            blob = httpx.get(f"{server.url}/v1/globals/{task['global_hash']}",
                             headers=auth(secrets[train[0]])).content
            return {"run": task["run_id"], "round": task["round"], "hash": task["global_hash"],
                    "global": state_from_bytes(blob), "sampled": [secrets[c] for c in train],
                    "unsampled": [secrets[c] for c in secrets if c not in train]}


def snapshot(server: Server) -> tuple:
    status = server.status()
    blobs = sorted(p.name for p in (server.data_dir / "blobs").rglob("*") if p.is_file())
    return status["rounds_done"], status["current_round"], blobs


def valid_update(rnd: dict, shift: float = 0.01) -> dict[str, torch.Tensor]:
    return {k: v + shift for k, v in rnd["global"].items()}


def upload(server: Server, rnd: dict, secret: str, body: bytes, num_samples: int = 10,
           round_index: int | None = None, run: int | None = None) -> httpx.Response:
    """PUT an update body for a round (default: the open one) as the client with ``secret``."""
    index = rnd["round"] if round_index is None else round_index
    return httpx.put(f"{server.url}/v1/runs/{run or rnd['run']}/rounds/{index}/update",
                     params={"num_samples": num_samples}, content=body,
                     headers={**auth(secret), "Content-Type": "application/octet-stream"})
