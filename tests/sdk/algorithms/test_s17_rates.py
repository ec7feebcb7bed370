"""A pull that the run's step size amplifies is refused with the config, before anything runs.

Ditto's lam and FedProx's mu pull the trained weights toward the global model inside momentum
SGD; along a direction the loss leaves flat that is heavy-ball SGD on curvature
``strength + weight_decay``, which diverges once ``lr`` times it reaches 2 (1 + momentum).
pFedMe's mini-batches scale theta - w there by (1 - personal_lr lam)^K (1 - lr lam). Each
setting was inside its own range, so such a run used to start and train to NaN. The tests
show the rule's side: just under it a client trains; past it the same client's weights blow up.
"""

from __future__ import annotations

import math

import pytest
from baselines_harness import algo, ctx, tiny_data

from pflkit.sdk.algorithms import LocalTraining
from pflkit.sdk.registry import ImportPolicy
from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.sdk.task_config import TaskConfig

LOCAL = LocalTraining(epochs=10, batch_size=16, momentum=0.9, weight_decay=1e-4)
LR = 0.05
LIMIT = 2 * (1 + LOCAL.momentum) / LR - LOCAL.weight_decay  # 75.9999 for lam and mu
PULLS = [("ditto", "lam"), ("fedprox", "mu")]


def largest_weight(name: str, lr: float, **params: float) -> float:
    """One client's round: the largest trained weight it would send or keep (NaN if any)."""
    method, data = algo(name, LOCAL, **params), tiny_data()
    start = method.aggregation.init_global(seed=0)
    result = method.training.fit(start, method.training.init_client(0, 0, data), data,
                                 ctx(lr=lr))
    trained = result.client_state.tensors if name == "ditto" else result.update
    return max(float(v.abs().max()) for v in trained.values() if v.is_floating_point())


@pytest.mark.parametrize(("name", "key"), PULLS)
def test_a_pull_under_the_bound_trains_and_one_past_it_blows_up(name: str, key: str) -> None:
    assert largest_weight(name, LR, **{key: 0.9 * LIMIT}) < 1
    assert math.isnan(largest_weight(name, LR, **{key: 1.03 * LIMIT}))


def test_pfedme_under_its_bound_trains_and_past_it_blows_up() -> None:
    params = {"personal_lr": 0.05, "inner_steps": 1, "lam": 15.0}  # bound: lr < 1/3
    assert largest_weight("pfedme", 0.9 / 3, **params) < 1
    assert math.isnan(largest_weight("pfedme", 1.5 / 3, **params))


def run_toml(name: str, params: str, lr: float) -> str:
    return (f'[algorithm]\nname = "{name}"\n[algorithm.params]\n{params}\n[training]\n'
            f"lr = {lr}\nmomentum = {LOCAL.momentum}\nweight_decay = {LOCAL.weight_decay}\n")


@pytest.mark.parametrize(("name", "key"), PULLS)
def test_pfl_sim_refuses_a_pull_the_step_size_amplifies(name: str, key: str) -> None:
    assert SimConfig.from_toml(run_toml(name, f"{key} = {0.99 * LIMIT}", LR))
    with pytest.raises(ConfigError, match=rf"^algorithm\.params: {name}: hyperparameter "
                                          rf"'{key}' must be < 2 \(1 \+ momentum\) / lr - "
                                          rf"weight_decay = 75\.9999 \(lr 0\.05, momentum 0\.9, "):
        SimConfig.from_toml(run_toml(name, f"{key} = {1.01 * LIMIT}", LR))


def test_pfl_sim_refuses_pfedme_steps_that_amplify_theta_minus_w() -> None:
    params = "personal_lr = 0.05\ninner_steps = 1\nlam = 15.0"
    assert SimConfig.from_toml(run_toml("pfedme", params, 0.33))
    with pytest.raises(ConfigError, match=r"^algorithm\.params: pfedme: hyperparameter 'lam' "
                                          r"must be such that \|1 - personal_lr lam\|\^K "
                                          r"\|1 - lr lam\| < 1 \(with lr 0\.34, "):
        SimConfig.from_toml(run_toml("pfedme", params, 0.34))


def test_ditto_without_personal_epochs_has_no_pull_to_refuse() -> None:
    toml = run_toml("ditto", f"lam = {2 * LIMIT}\npersonal_epochs = 0", LR)
    assert SimConfig.from_toml(toml).algorithm.params["lam"] == 2 * LIMIT


def test_a_device_refuses_a_task_whose_pull_the_step_size_amplifies() -> None:
    """The device checks the task as pfl-sim checks the config: nothing trains."""
    wire = {"algorithm": "ditto", "params": {"lam": 1.01 * LIMIT}, "model": "twonn",
            "input_shape": [1, 28, 28], "num_classes": 10, "seed": 0, "total_rounds": 5,
            "lr_schedule": {"lr": LR, "decay": 0.99},
            "local": {"epochs": 1, "batch_size": 50, "momentum": LOCAL.momentum,
                      "weight_decay": LOCAL.weight_decay}}
    with pytest.raises(ConfigError, match=r"^task config: params: ditto: hyperparameter 'lam' "
                                          r"must be < 2 \(1 \+ momentum\)"):
        TaskConfig.from_wire(wire, ImportPolicy())
    wire["params"] = {"lam": 0.99 * LIMIT}
    assert TaskConfig.from_wire(wire, ImportPolicy()).params == wire["params"]
