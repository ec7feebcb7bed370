"""Helpers of the server tests: real pfl-server and pfl-client processes on loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import torch
from waiting import GUARD

BIN = Path(sys.executable).parent
ADMIN = "admin-token-for-tests-0123456789"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_toml(algorithm: str = "fedavg", rounds: int = 3, num_clients: int = 3,
             per_round: int = 2, params: str = "", model: str = "twonn", kind: str = "iid",
             resize: int | None = None) -> str:
    size = f"resize = {resize}\n" if resize else ""
    alpha = "alpha = 1.0\n" if kind == "dirichlet" else ""  # only a Dirichlet deal reads it
    return (f"seed = 0\nrounds = {rounds}\neval_interval = {rounds}\n"
            f"[data]\ndataset = \"synthetic\"\n{size}kind = \"{kind}\"\n"
            f"num_clients = {num_clients}\n{alpha}"
            f"[model]\nname = \"{model}\"\n"
            f"[algorithm]\nname = \"{algorithm}\"\n[algorithm.params]\n{params}\n"
            f"[training]\nclients_per_round = {per_round}\nepochs = 1\nbatch_size = 50\n"
            f"lr = 0.05\nmomentum = 0.5\n")


@dataclass
class Server:
    """One pfl-server process (restartable on the same data directory and port)."""

    root: Path
    config: str
    flags: list[str] = field(default_factory=list)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def start(self, crash_at: str | None = None) -> None:
        (self.root / "run.toml").write_text(self.config)
        (self.root / "admin").write_text(ADMIN)
        (self.root / "admin").chmod(0o600)  # a token file others may read gets a warning
        env = {k: v for k, v in os.environ.items() if not k.startswith("PFL_SERVER_")}
        env.pop("PFLKIT_CRASH_AT", None)
        if crash_at:
            env["PFLKIT_CRASH_AT"] = crash_at
        log = (self.root / "server.log").open("a")
        self.proc = subprocess.Popen(
            [str(BIN / "pfl-server"), "serve", "--data-dir", str(self.data_dir),
             "--run-config", str(self.root / "run.toml"), "--admin-token-file",
             str(self.root / "admin"), "--port", str(self.port), "--log-level", "warning",
             # rounds close at quorum, not at a deadline a busy machine could reach first
             "--round-deadline", str(2 * GUARD), *self.flags],
            stdout=log, stderr=subprocess.STDOUT, env=env)
        # a crash point may be reached before /health answers (a round already due at start
        # is closed by the first tick): the caller then sees the SIGKILL itself
        self.wait_healthy(crash_expected=crash_at is not None)

    def wait_healthy(self, crash_expected: bool = False) -> None:
        deadline = time.monotonic() + GUARD
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                if crash_expected and self.proc.returncode == -signal.SIGKILL:
                    return
                raise RuntimeError(f"server exited: {(self.root / 'server.log').read_text()}")
            try:
                if httpx.get(f"{self.url}/v1/health", timeout=2).status_code == 200:  # retried
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)  # poll
        raise TimeoutError("server did not become healthy")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)  # cleanup: killed after that
            except subprocess.TimeoutExpired:
                self.kill()

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=GUARD,
                            headers={"Authorization": f"Bearer {ADMIN}"})

    def status(self) -> dict:
        with self.admin() as http:
            return http.get("/v1/runs/current").raise_for_status().json()

    def token(self, client_id: int | None = None) -> str:
        with self.admin() as http:
            body = {} if client_id is None else {"client_id": client_id}
            return http.post("/v1/enrollment-tokens", json=body).raise_for_status().json()["token"]

    def enroll(self, client_id: int | None = None) -> tuple[int, str]:
        reply = httpx.post(f"{self.url}/v1/clients/enroll", json={"token": self.token(client_id)})
        body = reply.raise_for_status().json()
        return body["client_id"], body["secret"]

    def wait_for(self, predicate) -> dict:
        deadline = time.monotonic() + GUARD
        while time.monotonic() < deadline:
            status = self.status()
            if predicate(status):
                return status
            time.sleep(0.2)  # poll
        raise TimeoutError(f"condition not reached; last status {status}")


def client_data_dirs(root: Path, config_text: str) -> dict[int, Path]:
    """Write each simulated client's train split as a pfl-client data folder."""
    import tomllib

    from pflkit.sdk.builder import build_run
    from pflkit.sdk.client import save_client_data
    from pflkit.sdk.run_config import SimConfig

    federation, _ = build_run(SimConfig.from_mapping(tomllib.loads(config_text)))
    dirs = {}
    for cid, client in federation.clients.items():
        dirs[cid] = root / f"client{cid}"
        dirs[cid].mkdir(parents=True)
        save_client_data(dirs[cid] / "data.safetensors", client.train)
    return dirs


def spawn_client(server: Server, data_dir: Path, token: str | None) -> subprocess.Popen:
    args = [str(BIN / "pfl-client"), "--server", server.url, "--data", str(data_dir),
            "--threads", "1", "--give-up-after", str(GUARD), "--max-backoff", "1",
            "--log-level", "warning"]
    if token:
        args += ["--token", token]
    log = (data_dir / "client.log").open("a")
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)


def simulated_global(config_text: str, run_dir: Path):
    """The global state pfl-sim reaches with the same config (the reference result)."""
    import tomllib

    # the servers and clients it is compared with run one thread (tests/conftest.py)
    assert torch.get_num_threads() == 1, f"the test process runs {torch.get_num_threads()} threads"

    from pflkit.sdk.run_config import SimConfig
    from pflkit.server.simulator import Simulation

    sim = Simulation(SimConfig.from_mapping(tomllib.loads(config_text)), run_dir,
                     progress=False)
    while not sim.coordinator.finished:
        sim.run_round()
    return sim.coordinator.global_state


def server_global(server: Server, digest: str):
    from pflkit.sdk.tensorio import load_state

    return load_state(server.data_dir / "blobs" / digest[:2] / digest)
