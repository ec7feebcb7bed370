"""bench-scale's plain-2x1 reference trains what the one-process plain loop trains."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import torch  # noqa: E402
from bench_overhead import plain_rounds  # noqa: E402  (a script folder, not a package)
from plain_processes import plain_process_rounds, split_by_rows  # noqa: E402

from pflkit.sdk.run_config import (  # noqa: E402
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.server.simulator import Simulation  # noqa: E402


def tiny_config() -> SimConfig:
    """Rebuilt in each spawned process (a module-level function: picklable by name)."""
    return SimConfig(
        seed=0, rounds=3, eval_interval=3, checkpoint_interval=3,
        data=DataConfig(dataset="digits", kind="dirichlet", num_clients=6, alpha=0.5),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig("fedavg"),
        training=TrainingConfig(clients_per_round=4, epochs=1, batch_size=16))


def test_a_split_puts_the_largest_clients_on_the_lightest_share():
    shares = split_by_rows({1: 50, 2: 40, 3: 30, 4: 20, 5: 5}, 2)
    assert shares == [[1, 4, 5], [2, 3]]  # 75 and 70 rows: within one client's rows


def test_two_processes_end_where_one_plain_loop_ends(tmp_path):
    sim = Simulation(tiny_config(), tmp_path / "run", progress=False)
    _, one = plain_rounds(sim, 2)
    seconds, two = plain_process_rounds(sim, tiny_config, 2)
    assert len(seconds) == 2
    assert one.keys() == two.keys()
    for name in one:  # the same fits; the n-weighted sums are added in another order
        torch.testing.assert_close(two[name], one[name], rtol=0, atol=1e-6)
    assert any(not torch.equal(two[n], sim.coordinator.global_state[n]) for n in two)  # trained
    sim.close()
