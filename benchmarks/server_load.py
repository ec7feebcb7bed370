"""bench-server's simulated devices: a real pfl-server process and its clients.

:class:`Bench` starts ``pfl-server`` (WORKERS uvicorn workers) on loopback, enrolls CLIENTS
clients and runs their rounds: asyncio tasks (httpx) spread over GENERATORS forked
load-generator processes (:func:`generator_pool`), each polling its task, downloading the
global state, waiting its simulated training time and uploading a distinct ~1 MB update.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.pool import Pool
from pathlib import Path

import httpx
import numpy as np

from pflkit.sdk.tensorio import state_from_bytes, state_to_bytes

ADMIN = "bench-admin-token-0123456789"
ROOT = Path(os.environ.get("PFLKIT_BENCH_RUNS", "/tmp/pflkit-bench-runs")) / "server"
CLIENTS = int(os.environ.get("CLIENTS", "200"))  # smaller only for quick checks
WORKERS = int(os.environ.get("WORKERS", "2"))  # uvicorn worker processes: one per core here
# load-generator processes: devices are separate machines, and one asyncio loop driving all
# 200 would queue their requests behind each other's downloads in the measuring process
GENERATORS = int(os.environ.get("GENERATORS", "4"))
PARTS = ("admit", "body", "accept")  # an upload's Server-Timing parts inside the app


def config(per_round: int, rounds: int) -> str:
    return (f"seed = 0\nrounds = {rounds}\n[data]\ndataset = \"synthetic\"\nresize = 32\n"
            f"num_clients = {CLIENTS}\n[model]\nname = \"twonn\"\n[algorithm]\nname = \"fedavg\"\n"
            f"[training]\nclients_per_round = {per_round}\nepochs = 1\n")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Bench:
    """A pfl-server process on loopback and the enrolled clients that load it."""

    def __init__(self, spread: float) -> None:
        self.spread = spread
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin = {"Authorization": f"Bearer {ADMIN}"}
        self.proc: subprocess.Popen | None = None
        self.bodies: dict[int, bytes] = {}  # built once per client, before any timing

    def start(self, rounds: int) -> None:
        if ROOT.exists():
            shutil.rmtree(ROOT)
        ROOT.mkdir(parents=True)
        (ROOT / "run.toml").write_text(config(CLIENTS, rounds))
        (ROOT / "admin").write_text(ADMIN)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "pfl-server"), "serve", "--data-dir",
             str(ROOT / "data"), "--run-config", str(ROOT / "run.toml"), "--admin-token-file",
             str(ROOT / "admin"), "--port", str(self.port), "--min-enrolled", str(CLIENTS),
             "--log-level", os.environ.get("LOG_LEVEL", "warning"), "--workers", str(WORKERS)],
            stdout=(ROOT / "server.log").open("w"), stderr=subprocess.STDOUT, env=env)
        for _ in range(600):
            try:
                if httpx.get(f"{self.url}/v1/health").status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.2)
        raise RuntimeError("server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)

    def enroll(self) -> list[str]:
        secrets = []
        with httpx.Client(base_url=self.url, timeout=60) as http:
            for cid in range(CLIENTS):
                token = http.post("/v1/enrollment-tokens", json={"client_id": cid},
                                  headers=self.admin).json()["token"]
                secrets.append(http.post("/v1/clients/enroll",
                                         json={"token": token}).json()["secret"])
        return secrets

    def prepare_bodies(self, secrets: list[str]) -> None:
        """Every client's update, built from the first global state before any timing."""
        digest = self.status()["global_hash"]
        blob = httpx.get(f"{self.url}/v1/globals/{digest}", timeout=60,
                         headers={"Authorization": f"Bearer {secrets[0]}"}).content
        self.bodies = {cid: distinct_update(blob, cid) for cid in range(len(secrets))}

    def status(self) -> dict:
        return httpx.get(f"{self.url}/v1/runs/current", headers=self.admin, timeout=60).json()

    def new_run(self, per_round: int, rounds: int) -> None:
        with httpx.Client(base_url=self.url, headers=self.admin, timeout=60) as http:
            current = http.get("/v1/runs/current").json()
            if current["status"] in ("active", "paused"):
                http.post(f"/v1/runs/{current['id']}/stop").raise_for_status()
            http.post("/v1/runs", json={"config_toml": config(per_round, rounds)}
                      ).raise_for_status()

    async def client_round(self, http: httpx.AsyncClient, cid: int, secret: str, round_index: int,
                           gate: asyncio.Semaphore, out: dict, training_seconds: float) -> None:
        headers = {"Authorization": f"Bearer {secret}"}
        while True:  # a device's poll and download: a failure counts, then it tries again
            try:
                task = (await http.get("/v1/task", headers=headers)).raise_for_status().json()
                if task["status"] == "train" and task["round"] == round_index:
                    reply = await http.get(f"/v1/globals/{task['global_hash']}",
                                           headers=headers)
                    if len(reply.raise_for_status().content) > 0:
                        break
                await asyncio.sleep(task["retry_after"])
            except httpx.HTTPError as err:
                out["errors"] += 1
                out["error_messages"].append(f"poll/download: {err!r}")
                await asyncio.sleep(0.5)
        body = self.bodies[cid]
        await asyncio.sleep(training_seconds)
        async with gate:
            started = time.perf_counter()
            try:
                reply = await http.put(
                    f"/v1/runs/{task['run_id']}/rounds/{round_index}/update",
                    params={"num_samples": 10}, content=body,
                    headers={**headers, "Content-Type": "application/octet-stream"})
                ok = reply.status_code == 200
                timing = dict(part.strip().split(";dur=") for part in
                              reply.headers.get("server-timing", "").split(",") if "dur=" in part)
                out["server_ms"].append(float(timing.get("app", "nan")))
                for part in PARTS:
                    out[f"{part}_ms"].append(float(timing.get(part, "nan")))
                if not ok:
                    out["error_messages"].append(f"{reply.status_code} {reply.text[:120]}")
            except httpx.HTTPError as err:
                ok = False
                out["error_messages"].append(repr(err))
            done = time.perf_counter()
        out["latencies"].append(done - started)
        out["errors"] += 0 if ok else 1
        out["first_upload"] = min(out.get("first_upload", started), started)
        out["last_ack"] = max(out.get("last_ack", done), done)

    async def drive(self, round_index: int, in_flight: int, secrets: dict[int, str],
                    seed: int) -> dict:
        """One load generator's share of a round: its clients as tasks on one asyncio loop."""
        rng = np.random.default_rng(seed)
        out: dict = {"latencies": [], "server_ms": [], "errors": 0, "error_messages": [],
                     **{f"{part}_ms": [] for part in PARTS}}
        limits = httpx.Limits(max_connections=len(secrets), max_keepalive_connections=len(secrets))
        async with httpx.AsyncClient(base_url=self.url, timeout=120, limits=limits) as http:
            gate = asyncio.Semaphore(in_flight)
            await asyncio.gather(*(self.client_round(http, cid, secret, round_index, gate, out,
                                                     float(rng.uniform(0, self.spread)))
                                   for cid, secret in secrets.items()))
        return out

    def round(self, pool: Pool, secrets: list[str], round_index: int, in_flight: int) -> dict:
        """Every sampled client's round, split over the load-generator processes."""
        sampled = self.status()["current_round"]["sampled"]
        shares = [sampled[i::GENERATORS] for i in range(GENERATORS) if sampled[i::GENERATORS]]
        parts = pool.starmap(_drive, [
            (round_index, max(1, in_flight // len(shares)), {c: secrets[c] for c in share},
             round_index * GENERATORS + i) for i, share in enumerate(shares)])
        out: dict = {key: [v for part in parts for v in part[key]] for key in
                     ("latencies", "server_ms", "error_messages", *(f"{p}_ms" for p in PARTS))}
        out["errors"] = sum(part["errors"] for part in parts)
        out["first_upload"] = min(part["first_upload"] for part in parts)
        out["last_ack"] = max(part["last_ack"] for part in parts)
        while self.status()["rounds_done"] <= round_index:
            time.sleep(0.01)
        out["closed"] = time.perf_counter()
        out["close_seconds"] = out["closed"] - out["last_ack"]
        out["updates"] = len(sampled)
        return out


_BENCH: Bench | None = None  # what the forked load-generator processes inherit


def generator_pool(bench: Bench) -> Pool:
    """Fork the load generators; after ``bench.bodies`` exist, so they share them copy-on-write."""
    global _BENCH
    _BENCH = bench
    return multiprocessing.get_context("fork").Pool(GENERATORS)


def _drive(round_index: int, in_flight: int, secrets: dict[int, str], seed: int) -> dict:
    """Run in a load-generator process (perf_counter is system-wide: times compare)."""
    assert _BENCH is not None
    return asyncio.run(_BENCH.drive(round_index, in_flight, secrets, seed))


def distinct_update(global_blob: bytes, cid: int) -> bytes:
    """A client's ~1 MB update: the global state shifted by a client-specific constant.

    Built once per client before the rounds and reused in every round (the server keys uploads
    by round and client): serializing in this single-threaded client loop while other uploads
    are in flight would add client-side delay to their measured latency.
    """
    state = state_from_bytes(global_blob)
    return state_to_bytes({k: v + 1e-4 * (cid + 1) for k, v in state.items()})
