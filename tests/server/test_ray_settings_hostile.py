"""Odd Ray settings a researcher may type: each is one line or a sane worker count, never a hang.

``num_cpus = 0.00001`` divided by zero while the workers were counted; ``num_cpus = 0.00015``
on 2 cores asked Ray for 10 000 worker processes and the run never reached a round; a machine
without Ray got a two-screen traceback instead of the install hint.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest
from test_executors import config  # the executor seam's small digits run
from test_ray_placement import node

from pflkit.sdk.run_config import ConfigError, DataConfig, ExecutionConfig
from pflkit.server.ray_cluster import MOST_WORKERS, check_reachable, worker_count
from pflkit.server.simulator import Simulation


@pytest.mark.parametrize(("key", "value"), [("num_cpus", 0.00001), ("num_gpus", 0.00005)])
def test_a_resource_finer_than_rays_unit_is_one_line(key: str, value: float) -> None:
    with pytest.raises(ConfigError) as refused:
        worker_count([node(2, gpus=1)], ExecutionConfig(executor="ray", **{key: value}))
    assert str(refused.value) == f"execution.{key}: Ray counts resources in steps of 0.0001, " \
                                 f"got {value:g}"


def test_the_default_count_starts_no_more_workers_than_workers_may_name() -> None:
    settings = ExecutionConfig(executor="ray", num_cpus=0.0001)
    assert worker_count([node(2)], settings) == MOST_WORKERS == 1024  # 20 000 would fit


def test_a_run_without_ray_is_one_line_naming_the_executor(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` sees where it is absent
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"^execution\.executor: the ray executor needs Ray, "
                                          r".*: pip install 'pflkit\[ray\]'$"):
        Simulation(config(executor="ray"), out, progress=False)
    assert not out.exists()


def test_the_default_count_is_no_larger_than_the_clients(tmp_path) -> None:
    """Four half-CPU workers fit on 2 CPUs; with 2 clients, the other two would fit nothing."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        cfg = config(executor="ray", num_cpus=0.5)
        cfg = cfg.replace(data=DataConfig(dataset="digits", kind="iid", num_clients=2),
                          training=dataclasses.replace(cfg.training, clients_per_round=2))
        sim = Simulation(cfg, tmp_path / "run", progress=False)
        try:
            assert len(sim.executor.workers) == 2
        finally:
            sim.close()
    finally:
        ray.shutdown()


def test_a_port_out_of_range_is_named_as_such() -> None:
    """Port 99999 was reported as 'Connection refused', as if a cluster could be there."""
    with pytest.raises(ValueError, match=r"^execution\.ray_address: expected HOST:PORT \(PORT "
                                         r"in \[1, 65535\]\).*got '127\.0\.0\.1:99999'$"):
        check_reachable("127.0.0.1:99999", 1.0)


def test_auto_without_a_running_cluster_names_the_setting(tmp_path, monkeypatch) -> None:
    """Ray's own line pointed at a ``--address`` flag that pfl-sim does not have."""
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # where Ray looks for a running cluster
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = tmp_path / "run"
    with pytest.raises(ConnectionError) as refused:
        Simulation(config(executor="ray", ray_address="auto"), out, progress=False)
    assert str(refused.value) == "execution.ray_address: no Ray cluster to join at 'auto' " \
        "(Could not find any running Ray instance; start one with `ray start --head`)"
    assert not out.exists()
