"""bench-natural: how long partition.kind = "natural" takes on 10,000 users and 1M rows.

A synthetic per-user log (12 float32 features, 10 classes, user sizes drawn from Dir(1), so
some users fall below min_size) is dealt as pfl-sim deals it: the seeded natural deal, every
client's tensors, the partition file pfl-sim writes and its partition table. Each step is timed
REPEATS times; the median is reported. Target: the deal under 10 s on 2 cores.

    make bench-natural
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from common import RESULTS, save, set_threads

from pflkit.sdk.data import Dataset, PartitionConfig, partition_table
from pflkit.sdk.data.federation import deal_dataset
from pflkit.sdk.tensorio import save_state

USERS = int(os.environ.get("USERS", "10000"))
ROWS = int(os.environ.get("ROWS", "1000000"))
REPEATS = int(os.environ.get("REPEATS", "3"))
CONFIG = PartitionConfig("natural", num_clients=USERS, min_size=10, test_fraction=0.2,
                         num_new_clients=100)


def user_logs() -> Dataset:
    """ROWS rows of USERS users, in no particular order."""
    rng = np.random.default_rng(0)
    users = rng.choice(USERS, size=ROWS, p=rng.dirichlet(np.ones(USERS)))
    x = torch.from_numpy(rng.normal(size=(ROWS, 12)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 10, size=ROWS))
    return Dataset.from_raw("user-logs", [str(c) for c in range(10)], (x, y), (x[:100], y[:100]),
                            users=torch.from_numpy(users))


def timed(step: Callable[[], object]) -> tuple[float, object]:
    """Median seconds of REPEATS calls, and the last call's result."""
    times, out = [], None
    for _ in range(REPEATS):
        started = time.perf_counter()
        out = step()
        times.append(time.perf_counter() - started)
    return statistics.median(times), out


def main() -> None:
    threads = set_threads()
    data = user_logs()
    deal_s, part = timed(lambda: deal_dataset(data, CONFIG, seed=0))
    federation_s, federation = timed(lambda: part.federation(data))
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "partition.safetensors"
        save_s, _ = timed(lambda: save_state(file, part.to_state()))
        size_mb = file.stat().st_size / 1e6
    table_s, table = timed(lambda: partition_table(federation, 200))
    steps = {"natural deal (partition)": deal_s, "every client's tensors": federation_s,
             f"partition.safetensors ({size_mb:.0f} MB)": save_s, "partition table": table_s}
    save("natural", {"users": USERS, "rows": ROWS, "repeats": REPEATS, "threads": threads,
                     "seconds": steps, "summary": part.users.describe()})
    lines = [
        "# bench-natural",
        "",
        f"Command: `make bench-natural` (USERS={USERS}, ROWS={ROWS}, REPEATS={REPEATS}, "
        f"PFLKIT_THREADS={threads}; median of the repeats, on the shared 2-core machine). "
        f"A synthetic per-user log: {ROWS:,} rows of 12 float32 features and 10 classes, "
        f"{USERS:,} users whose sizes are drawn from Dir(1); `kind = \"natural\"`, "
        f"num_clients = {CONFIG.num_clients}, min_size = {CONFIG.min_size}, "
        f"test_fraction = {CONFIG.test_fraction}, num_new_clients = {CONFIG.num_new_clients}. "
        f"{table.splitlines()[0]}.",
        "",
        "| step | seconds (median) |",
        "|---|---|",
        *(f"| {name} | {s:.2f} |" for name, s in steps.items()),
        "",
        f"Target: the deal under 10 s on 2 cores: {deal_s:.2f} s "
        f"({'met' if deal_s < 10 else 'NOT met'}).",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "natural.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
