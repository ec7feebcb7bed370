"""Ray workers that the cluster's nodes cannot place are refused in one line, not waited for.

A worker asking for more CPUs (or GPUs) than any node has, or more workers than the nodes hold,
is never started by Ray, and every client sent to it waits with it: such a run hung without a
word after writing its folder (``num_cpus = 4`` on a 2-core machine). Now the run stops before
anything is written, with one line naming the key.
"""

from __future__ import annotations

import pytest
from test_executors import config  # the executor seam's small digits run

from pflkit.sdk.run_config import ConfigError, ExecutionConfig
from pflkit.server.ray_cluster import placeable, worker_count
from pflkit.server.simulator import Simulation

ray = pytest.importorskip("ray")


def node(cpus: float, gpus: float = 0.0, alive: bool = True) -> dict[str, object]:
    """A ``ray.nodes()`` entry with these resources."""
    resources = {"CPU": cpus} | ({"GPU": gpus} if gpus else {})
    return {"Alive": alive, "Resources": resources}


def test_each_node_is_counted_on_its_own_in_rays_resource_units() -> None:
    """Two 3-CPU nodes hold two 2-CPU workers (totals say three); 0.1 CPU fits 20 times in 2."""
    assert placeable([node(3), node(3)], 2.0, 0.0) == 2
    assert placeable([node(2)], 0.1, 0.0) == 20
    assert placeable([node(8, gpus=1), node(8)], 1.0, 0.5) == 2
    assert placeable([node(64, alive=False), node(2)], 1.0, 0.0) == 2


@pytest.mark.parametrize(("settings", "message"), [
    ({"num_cpus": 4.0}, "execution.num_cpus: no node of the Ray cluster has num_cpus = 4 for a "
                        "worker (largest: 2 CPUs, 0 GPUs)"),
    ({"workers": 3}, "execution.workers: 3 workers of num_cpus = 1 do not fit on the Ray "
                     "cluster's nodes (at most 2 do)"),
    ({"num_gpus": 1.0}, "execution.num_gpus: no node of the Ray cluster has num_cpus = 1, "
                        "num_gpus = 1 for a worker (largest: 2 CPUs, 0 GPUs)"),
])
def test_workers_that_cannot_be_placed_are_one_line(settings: dict[str, float],
                                                    message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        worker_count([node(2)], ExecutionConfig(executor="ray", **settings))
    assert str(refused.value) == message


def test_the_default_count_is_what_the_nodes_hold() -> None:
    assert worker_count([node(2), node(3)], ExecutionConfig(executor="ray", num_cpus=1.5)) == 3
    assert worker_count([node(2)], ExecutionConfig(executor="ray", workers=2)) == 2


def test_a_run_asking_for_more_workers_than_fit_stops_before_writing(tmp_path) -> None:
    """On a 2-CPU local cluster: 3 workers of one CPU would leave a third of the clients waiting."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for settings in ({"workers": 3}, {"num_cpus": 4.0}):
            out = tmp_path / str(len(list(tmp_path.iterdir())))
            with pytest.raises(ConfigError, match="do not fit|no node"):
                Simulation(config(executor="ray", **settings), out, progress=False).close()
            assert not out.exists()
        assert ray.is_initialized()  # a cluster the run did not start is left running
    finally:
        ray.shutdown()
