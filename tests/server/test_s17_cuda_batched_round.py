"""A batched round on the GPU waits for the device a fixed number of times, whatever its steps.

Issue 22, item 2: every per-step tensor stays on the device and the round's losses are read
together. Counted under tests/fake_cuda.py through the batched executor of ``pfl-sim``: host
synchronizations and device-to-host copies (tests/sdk/test_batched_training.py counts the
synchronizations of ``fit_batch`` for the other methods).
"""

from collections import Counter
from dataclasses import replace

import pytest
from device_runs import device_config
from fake_cuda import FakeCuda

from pflkit.server.simulator import Simulation


def round_reads(tmp_path, algorithm: str, epochs: int) -> Counter:
    """Where a round of 2 clients on the fake device read it (evaluation is every 2 rounds)."""
    config = device_config(algorithm, "", "cuda", "batched")
    config = replace(config, training=replace(config.training, epochs=epochs))
    with FakeCuda() as fake:
        sim = Simulation(config, tmp_path / f"{algorithm}{epochs}", progress=False)
        fake.syncs.clear(), fake.downloads.clear()
        row = sim.run_round()
        sim.close()
    assert "global_top1" not in row and len(row["clients"]) == 2
    return Counter(fake.syncs + fake.downloads)


@pytest.mark.parametrize("algorithm", ["fedavg", "fedper", "lg_fedavg", "local", "superfed_mm",
                                       "fedrod_linear"])
def test_a_batched_round_reads_the_device_as_often_for_three_epochs_as_for_one(tmp_path,
                                                                              algorithm):
    once, thrice = round_reads(tmp_path, algorithm, 1), round_reads(tmp_path, algorithm, 3)
    assert thrice == once
    assert not [r for r in thrice if "batched_training" in r or "step_capture" in r], thrice
