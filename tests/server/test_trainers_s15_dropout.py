"""A model with dropout trains the same weights however its run is interrupted.

Dropout draws from torch's global generator: drawn from the process's state, a run resumed in
a new process (or anything else drawing in between) trained other weights than the
uninterrupted run, and a Ray worker other weights than the sequential executor.
"""

import math

import torch
from device_runs import device_config
from torch import nn

from pflkit.sdk.models import MODELS, ModelInfo, SplitModel
from pflkit.server.simulator import Simulation


def dropout_net(shape, num_classes):
    body = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), 32), nn.ReLU(), nn.Dropout(0.5))
    return SplitModel(body, nn.Linear(32, num_classes), 32)


def test_a_resumed_run_of_a_dropout_model_equals_the_uninterrupted_run(tmp_path, monkeypatch):
    monkeypatch.setitem(MODELS, "dropnet", ModelInfo(dropout_net, "test"))
    config = device_config("fedavg_ft", "", "cpu", "sequential", model="dropnet")
    want = Simulation(config, tmp_path / "whole", progress=False).run()
    stopped = Simulation(config, tmp_path / "stopped", progress=False)
    stopped.run_round()
    stopped.close()
    torch.rand(3)  # a new process starts from torch's default state, not round 1's
    got = Simulation.resume(tmp_path / "stopped", progress=False).run()
    assert all(torch.equal(got.global_state[k], v) for k, v in want.global_state.items())
    assert got.final == want.final  # the fine-tuning stage draws its dropout masks alike
