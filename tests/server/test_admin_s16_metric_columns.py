"""``pfl-admin status`` shows at most 12 metric columns, those the rounds shown have most.

A device may report up to 64 metrics of names it chooses with each upload (sdk/protocol.py).
Before, the table had a column for every name any round of the run ever had: one device
naming 64 new metrics a round made 200 rounds a table of 12800 columns, each squeezed to
nothing (``train_loss`` among them), and each refresh took tens of seconds to draw. The server
is a real one on loopback whose answer is scripted (tests/sdk/hostile_harness.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from server_harness import BIN
from waiting import GUARD

sys.path.insert(0, str(Path(__file__).parents[1] / "sdk"))  # the device's hostile server
from hostile_harness import json_answer, serving  # noqa: E402

TOKEN = "adm1n-s3cret-t0ken"
ROUNDS = 200


def history() -> list[dict]:
    """Each round: the server's own metrics, train_loss, and 64 names no other round has."""
    return [{"index": i, "closed_at": 1.8e9 + i, "global_hash": None,
             "metrics": {"participants": 2, "samples": 200, "train_loss": 0.25,
                         **{f"r{i}_m{k}": 1.0 for k in range(64)}}} for i in range(ROUNDS)]


def test_status_shows_the_common_metrics_of_the_last_rounds_and_counts_the_rest():
    run = {"id": 1, "status": "active", "algorithm": "fedavg", "model": "twonn",
           "rounds_total": 1000, "rounds_done": ROUNDS, "global_hash": "0" * 64,
           "enrolled_clients": 3, "current_round": None, "history": history()}
    with serving() as server:
        server.add(json_answer(200, run))
        done = subprocess.run([str(BIN / "pfl-admin"), "--url", server.url, "--token", TOKEN,
                               "status", "--once"], capture_output=True, text=True,
                              timeout=GUARD, env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"})
    assert done.returncode == 0 and done.stderr == "", done.stderr
    header = next((line for line in done.stdout.splitlines() if "┃ round" in line), "")
    assert header.count("┃") == 2 + 12 + 1, done.stdout[:2000]  # round, closed, 12 metrics
    for name in ("participants", "samples", "train_loss", "r190_m0"):  # in all, then by name
        assert name in header, (name, header)
    assert "r189_m" not in done.stdout  # a round not shown adds no column
    hidden = 10 * 64 - 9  # the 10 rounds shown name 640 metrics of their own; 9 of them shown
    assert f"{hidden} more metrics of these rounds not shown (status --json lists every one)" \
        in done.stdout
