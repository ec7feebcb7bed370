"""bench-secagg: what secure aggregation costs a device and the server, per round, on one core.

100 devices, a 1M-parameter float32 update each, 0%, 10% and 30% of them dropping after they
shared their keys and before they send their masked input: the server's worst case (each
dropped device's mask key is rebuilt and its masks with every surviving neighbour removed).
Two graphs: the complete graph of SecAgg (k = 99, t = 51) and a SecAgg+ graph (k = 40,
t = 21; t > K / 2 of K = k + 1 holders in both). Everything runs in this one process on one
thread (numpy, OpenSSL and torch all single-threaded here), each call timed in CPU seconds
(``time.process_time``), so other jobs on the machine do not inflate it. Device time: the
device's four steps (keys, shares, masking, unmasking), mean and max over the devices that ran
them; server time: every receive and close of the round. Bytes: the payload of each message
(``wire_bytes``: bytes fields, 8 per id), against the plain float32 upload (4 MB). Every round's
decoded sum is checked against the plaintext sum within the quantization bound.

    make bench-secagg        (MODES=secagg,secagg+ DROPOUTS=0,10,30 DEVICES=100
                              DIMENSION=1000000 by default)
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import numpy as np
from common import save, set_threads, subset

from pflkit.sdk.secagg import quantize
from pflkit.sdk.secagg.client import SecAggClient
from pflkit.sdk.secagg.messages import RoundSetup, wire_bytes
from pflkit.sdk.secagg.server import SecAggServer

DEVICES = int(os.environ.get("DEVICES", "100"))
DIMENSION = int(os.environ.get("DIMENSION", "1000000"))
CLIP = 1.0
MODES = {"secagg": (99, 51), "secagg+": (40, 21)}  # name: (k neighbours, threshold t)
DROPOUTS = ["0", "10", "30"]  # percent
TARGETS = {"device_s": 1.0, "server_s": 5.0, "upload_ratio": 1.2}


def timed(clock: list[float], call, *args):
    started = time.process_time()
    out = call(*args)
    clock.append(time.process_time() - started)
    return out


def update(client: int) -> np.ndarray:
    return np.random.default_rng(client).normal(0, 0.1, DIMENSION).astype(np.float32)


def one_round(k: int, t: int, dropout: float) -> dict:
    roster = tuple(range(DEVICES))
    setup = RoundSetup(round_id=1, roster=roster, threshold=t, neighbours=k,
                       dimension=DIMENSION, clip_range=CLIP, graph_seed=b"bench")
    dropped = set(np.random.default_rng(7).choice(DEVICES, int(dropout * DEVICES), False))
    server = SecAggServer(setup, set())
    clients = {c: SecAggClient(c, setup) for c in roster}
    device = {c: [] for c in roster}
    srv: list[float] = []
    up = dict.fromkeys(roster, 0)
    down = dict.fromkeys(roster, 0)

    def send(c, receive, make, *args):
        msg = timed(device[c], make, *args)
        up[c] += wire_bytes(msg)
        timed(srv, receive, msg)

    for c in roster:
        send(c, server.receive_keys, clients[c].advertise_keys)
    directories = timed(srv, server.close_keys)
    for c in roster:
        down[c] += wire_bytes(directories[c])
        send(c, server.receive_shares, clients[c].share_keys, directories[c])
    inboxes = timed(srv, server.close_shares)
    plain = np.zeros(DIMENSION)
    survivors = [c for c in roster if c not in dropped]
    for c in survivors:
        down[c] += wire_bytes(inboxes[c])
        x = update(c)
        plain += x
        send(c, server.receive_masked, clients[c].masked_input, inboxes[c], x)
    request = timed(srv, server.close_masked)
    for c in survivors:
        down[c] += wire_bytes(request)
        send(c, server.receive_unmask, clients[c].unmask, request)
    result = timed(srv, server.finish)
    err = float(np.abs(result.total - plain).max())
    bound = quantize.sum_error_bound(CLIP, DEVICES, len(survivors))
    assert err <= bound * (1 + 1e-9), (err, bound)
    device_s = [sum(device[c]) for c in survivors]
    return {"k": k, "t": t, "dropout": dropout, "survivors": len(survivors),
            "device_s_mean": statistics.mean(device_s), "device_s_max": max(device_s),
            "server_s": sum(srv), "upload_bytes": max(up[c] for c in survivors),
            "download_bytes": max(down[c] for c in survivors), "plain_bytes": 4 * DIMENSION,
            "max_error": err, "error_bound": bound}


def table(rows: list[dict]) -> str:
    lines = ["| graph | k | t | dropout | device s (mean / max) | server s | upload bytes "
             "(x plain) | key material up | download bytes | sum error (bound) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        extra = r["upload_bytes"] - r["plain_bytes"]
        lines.append(
            f"| {r['mode']} | {r['k']} | {r['t']} | {100 * r['dropout']:.0f}% | "
            f"{r['device_s_mean']:.3f} / {r['device_s_max']:.3f} | {r['server_s']:.2f} | "
            f"{r['upload_bytes']:,} ({r['upload_bytes'] / r['plain_bytes']:.4f}x) | "
            f"{extra:,} | {r['download_bytes']:,} | {r['max_error']:.1e} "
            f"({r['error_bound']:.1e}) |")
    return "\n".join(lines)


def main() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    threads = set_threads()
    rows = []
    for mode in subset("MODES", list(MODES)):
        for pct in subset("DROPOUTS", DROPOUTS):
            k, t = MODES[mode]
            row = {"mode": mode, **one_round(k, t, int(pct) / 100)}
            print(f"{mode} dropout {pct}%: device {row['device_s_mean']:.3f} s, server "
                  f"{row['server_s']:.2f} s, upload {row['upload_bytes']:,} B", flush=True)
            rows.append(row)
    md = "\n".join([
        "# bench-secagg", "",
        "Command: `cd benchmarks && ../.venv/bin/python bench_secagg.py` (`make bench-secagg`)",
        "",
        f"{DEVICES} devices, a {DIMENSION:,}-parameter float32 update each (plain upload "
        f"{4 * DIMENSION:,} bytes), one round per row; the dropped devices leave after sharing "
        "their keys (the server's worst case). CPU seconds on one thread; bytes are the largest "
        "device's message payloads (upload: keys, sealed shares, masked vector, unmask shares; "
        "download: neighbours' keys, shares for it, the unmask request). Quantization: 32 bits, "
        f"clip range [-{CLIP:g}, {CLIP:g}], deterministic rounding. Targets: device <= "
        f"{TARGETS['device_s']:g} s, server <= {TARGETS['server_s']:g} s, upload <= "
        f"{TARGETS['upload_ratio']:g}x plain + O(k) key material.", "",
        table(rows), ""])
    (Path(__file__).resolve().parent / "results" / "secagg.md").write_text(md)
    save("secagg", {"threads": threads, "targets": TARGETS, "rows": rows})
    print(md)


if __name__ == "__main__":
    main()
