"""Why the Ray executor was no faster than sequential on bench-scale (a) (issue 22): a profile.

The same six client fits (round 1's first six clients of workload (a): FedAvg, FedRoD ConvNet,
E=5, B=40) timed, one process at a time, as CPU seconds and minor page faults of the process:

- in a Ray worker with glibc's adaptive malloc thresholds (pflkit before
  ``sdk/heap.py``: the worker built without :func:`~pflkit.sdk.heap.keep_freed_heap`);
- in a Ray worker as pflkit builds it now;
- in this process (the simulator's, 1 torch thread), and with 2 threads: what the sequential
  executor's two threads gain over one, which bounds what 2 x 1-thread workers can gain over it.

Rounds alternate between the systems; each row is the median of REPEATS (default 3).

    cd benchmarks && ../.venv/bin/python scale_ray_profile.py
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any

import ray
import torch
from common import RESULTS, save
from scale_workloads import fedavg_config

from pflkit.sdk.algorithms.base import ClientState, RoundContext
from pflkit.server.ray_executor import ClientWorker
from pflkit.server.simulator import Simulation

REPEATS = int(os.environ.get("REPEATS", "3"))
CLIENTS = 6
ROUND = 1


def minor_faults() -> int:
    stat = open("/proc/self/stat").read()
    return int(stat[stat.rindex(")") + 2:].split()[7])


class ProfiledWorker(ClientWorker):
    """pflkit's Ray worker, optionally built with glibc's default malloc thresholds."""

    def __init__(self, adaptive_malloc: bool, *args: Any) -> None:
        if adaptive_malloc:  # the worker as it was: its call to keep_freed_heap does nothing
            import pflkit.server.ray_executor as module
            module.keep_freed_heap = lambda: False
        super().__init__(*args)

    def time_fits(self, global_state: dict[str, torch.Tensor],
                  jobs: list[tuple[int, RoundContext]]) -> tuple[float, float, int]:
        return fit_all(self.algorithm, global_state, self.data, jobs)


def fit_all(algorithm: Any, global_state: dict[str, torch.Tensor], data: Any,
            jobs: list[tuple[int, RoundContext]]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and minor page faults of this process over the jobs' fits."""
    faults, cpu, wall = minor_faults(), time.process_time(), time.perf_counter()
    for cid, ctx in jobs:
        algorithm.training.fit(global_state, ClientState({}, {}), data[cid], ctx)
    return time.perf_counter() - wall, time.process_time() - cpu, minor_faults() - faults


def main() -> None:
    torch.set_num_threads(1)
    sim = Simulation(fedavg_config(), tempfile.mkdtemp(prefix="ray-profile-"), progress=False)
    global_state = sim.algorithm.aggregation.init_global(sim.config.seed)
    cids = sim.coordinator.sample(ROUND)[:CLIENTS]
    jobs = [(cid, sim.context(cid, ROUND)) for cid in cids]
    data = {cid: sim.federation.clients[cid].train for cid in cids}
    rows_np = {cid: (c.train.x.numpy(), c.train.y.numpy())
               for cid, c in sim.federation.all_clients.items()}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.path.dirname(__file__)}})
    args = (ray.put(sim.algorithm), ray.put(rows_np), "cpu", 1, "fp32", False, False)
    actor = ray.remote(num_cpus=1)(ProfiledWorker)
    workers = {"Ray worker, glibc's adaptive thresholds (before)": actor.remote(True, *args),
               "Ray worker, keep_freed_heap (now)": actor.remote(False, *args)}
    for worker in workers.values():  # warm: the first fit builds the template and caches
        ray.get(worker.time_fits.remote(global_state, jobs[:1]))
    fit_all(sim.algorithm, global_state, data, jobs[:1])
    runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in workers}
    for threads in (1, 2):
        runs[f"this process, {threads} torch thread(s)"] = []
    for _ in range(REPEATS):
        for name, worker in workers.items():
            runs[name].append(tuple(ray.get(worker.time_fits.remote(global_state, jobs))))
        for threads in (1, 2):
            torch.set_num_threads(threads)
            runs[f"this process, {threads} torch thread(s)"].append(
                fit_all(sim.algorithm, global_state, data, jobs))
    ray.shutdown()
    sim.close()
    rows = sum(len(d) for d in data.values())
    result = {"repeats": REPEATS, "clients": cids, "rows": rows,
              "load_average": os.getloadavg(),
              "runs": {k: {"wall": [w for w, _, _ in v], "cpu": [c for _, c, _ in v],
                           "faults": [f for _, _, f in v]} for k, v in runs.items()}}
    save("scale_ray_profile", result)
    text = render(result)
    print(text)
    (RESULTS / "scale_ray_profile.md").write_text(text)


def render(result: dict[str, Any]) -> str:
    lines = ["# bench-scale (a) on the CPU: a Ray worker's fits against this process's", "",
             "Command: `cd benchmarks && ../.venv/bin/python scale_ray_profile.py` (one run; "
             f"median of {result['repeats']}, the systems alternating, one process at a time; "
             f"load average at the end {', '.join(f'{v:.1f}' for v in result['load_average'])}"
             "). Round 1's first six clients of workload (a), FedAvg, FedRoD ConvNet, E=5, "
             "B=40; Ray workers with 1 torch thread. Reading: results/scale_cpu_profile.md.",
             "",
             f"| the same six fits ({result['rows']:,} rows x E=5) | wall s | CPU s | "
             "minor page faults | wall ms per row |", "|---|---|---|---|---|"]
    for name, run in result["runs"].items():
        wall = statistics.median(run["wall"])
        lines.append(f"| {name} | {wall:.2f} ({', '.join(f'{s:.2f}' for s in run['wall'])}) "
                     f"| {statistics.median(run['cpu']):.2f} | "
                     f"{statistics.median(run['faults']):,.0f} | "
                     f"{1000 * wall / result['rows']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
