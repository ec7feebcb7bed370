"""The batched executor: 20 rounds stay within the spread of a 1-ulp nudge of sequential.

Batched training is sequential training up to float rounding, and rounding differences grow
over rounds like any perturbation: what holds is that the batched run lands as close to the
sequential run as the sequential run nudged by one ulp lands. On the 8x8 digits (accuracy
93-96 %, not saturated: the old synthetic data scored 100.00 on both paths whatever the
batched path did), the final global weights of FedAvg, SuPerFed-MM, FedRoD, FedRep, Ditto,
SCAFFOLD, APFL and pFedMe differ by at most 2.5e-7 (relative L2) batched vs sequential and 1.4e-7
(FedRep) to 1.1e-3 (pFedMe) with every initial weight nudged up one ulp, while each of these
breakages of the batched path moves them by 5.0e-2 or more: twice the learning rate, no weight
decay, one batch-order generator shared by all clients, finished clients still stepping (their
momentum and weight decay), FedRep's body epochs drawing from the wrong generator. ``TOLERANCE``
sits between the two.
"""

import logging
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from device_runs import device_config
from waiting import GUARD

from pflkit.sdk import conv_gemm
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ExecutionConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.server.simulator import Simulation

TOLERANCE = 1e-2  # relative L2 distance of the final global weights (see the module docstring)


def config(algorithm, executor, rounds=20, params=None, dataset="digits"):
    return SimConfig(
        seed=2, rounds=rounds, eval_interval=rounds, checkpoint_interval=rounds,
        data=DataConfig(dataset=dataset, kind="dirichlet", num_clients=8, alpha=0.5, min_size=40,
                        test_fraction=0.2),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig(algorithm, params or {}),
        # weight decay large enough that dropping it moves the weights well past TOLERANCE
        training=TrainingConfig(clients_per_round=4, epochs=1, batch_size=16, lr=0.05,
                                momentum=0.9, weight_decay=2e-3),
        execution=ExecutionConfig(executor=executor),
    )


def run(tmp_path, algorithm, executor, name=None, nudge=False, **kwargs):
    sim = Simulation(config(algorithm, executor, **kwargs), tmp_path / (name or executor),
                     progress=False)
    if nudge:  # every initial weight one ulp up
        for tensor in sim.coordinator.global_state.values():
            if tensor.is_floating_point():
                tensor.copy_(torch.nextafter(tensor, torch.full_like(tensor, math.inf)))
    return sim.run()


def distance(a, b) -> float:
    """Relative L2 distance of two states (float64, over every tensor)."""
    diff = sum(float((a[k].double() - b[k].double()).square().sum()) for k in a)
    norm = sum(float(b[k].double().square().sum()) for k in b)
    return math.sqrt(diff / norm)


@pytest.mark.parametrize(("algorithm", "params"), [
    ("fedavg", {}),  # also the rounds of fedprox, fedavg_ft and pflmoe
    ("superfed_mm", {"sweep": False}),
    ("fedrod_linear", {}),
    ("fedrep", {}),  # per-client heads, two phases: also the rounds of fedper and lg_fedavg
    ("ditto", {}),  # w and v as 2K clients of one program
    ("scaffold", {}),  # corrected gradients, control variates from each client's own K
    ("apfl", {}),  # w, v and alpha from one backward; alpha clamped, without momentum
    ("pfedme", {}),  # K inner steps per batch, w's update at the next batch's first
])
def test_twenty_batched_rounds_land_within_the_spread_of_a_one_ulp_nudge(tmp_path, algorithm,
                                                                         params):
    sequential = run(tmp_path, algorithm, "sequential", params=params)
    nudged = run(tmp_path, algorithm, "sequential", "nudged", nudge=True, params=params)
    batched = run(tmp_path, algorithm, "batched", params=params)
    own = [r.final["clients"]["summary"]["own_top1_mean"] for r in (sequential, batched)]
    generic = [r.final["global_model"]["top1"] for r in (sequential, batched)]
    assert batched.final["rounds"] == 20
    assert 0.5 < own[0] < 0.99 and 0.5 < generic[0] < 0.99  # learned, and not saturated
    spread = distance(nudged.global_state, sequential.global_state)
    assert spread <= TOLERANCE, f"a 1-ulp nudge moves the run by {spread:.1e}: not a tolerance"
    apart = distance(batched.global_state, sequential.global_state)
    assert apart <= TOLERANCE, f"batched vs sequential {apart:.1e} (1-ulp nudge: {spread:.1e})"
    # one test row is 0.28 points of the global test set, 0.3-0.4 of a client's mean
    assert abs(own[1] - own[0]) <= 0.01 and abs(generic[1] - generic[0]) <= 0.01


def test_a_method_that_cannot_batch_logs_why_and_runs_as_sequential(tmp_path, caplog):
    option_1 = {"option": 1}  # every method has a batched trainer; SCAFFOLD's option I does not
    with caplog.at_level(logging.WARNING, logger="pflkit.server.batched_executor"):
        batched = run(tmp_path, "scaffold", "batched", rounds=2, dataset="synthetic",
                      params=option_1)
    assert ("scaffold option 1 takes a full-gradient pass before training: not batched; "
            "training clients one by one") in caplog.text
    sequential = run(tmp_path, "scaffold", "sequential", rounds=2, dataset="synthetic",
                     params=option_1)
    assert batched.final == sequential.final
    assert all(torch.equal(batched.global_state[k], sequential.global_state[k])
               for k in sequential.global_state)


def test_quiet_pfl_sim_prints_nothing_but_its_result_for_a_method_that_cannot_batch(tmp_path):
    """--quiet: no warning on stderr (the fallback to one by one is logged at WARNING)."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / "pfl-sim"), "--out", str(tmp_path / "run"),
         "--dataset", "digits", "--clients", "3", "--model", "twonn", "--rounds", "1",
         "--epochs", "1", "--algorithm", "scaffold", "--param", "option=1", "--executor",
         "batched", "--quiet"],
        capture_output=True, text=True, timeout=GUARD, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == f"report: {tmp_path / 'run' / 'report.md'}"


def test_a_batched_round_checks_and_folds_each_stack_once_and_changes_no_bit(tmp_path,
                                                                             monkeypatch):
    """Per-client checks and folds cost 1000 clients ~1 s a round on an H100 host (issue 22)."""
    from pflkit.sdk.algorithms.aggregators import WeightedMean
    from pflkit.server import executors
    from pflkit.server.coordinator import Coordinator

    calls = {"validate": 0, "add": 0}

    def counted(name, method):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return method(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(Coordinator, "validate", counted("validate", Coordinator.validate))
    monkeypatch.setattr(WeightedMean, "add", counted("add", WeightedMean.add))
    stacked = run(tmp_path, "fedavg", "batched", rounds=2)
    assert calls == {"validate": 0, "add": 0}
    monkeypatch.setattr(executors, "device_stacks", lambda states: None)  # one by one
    one_by_one = run(tmp_path, "fedavg", "batched", "one-by-one", rounds=2)
    assert calls == {"validate": 8, "add": 8}  # 2 rounds of 4 clients
    assert all(torch.equal(stacked.global_state[k], one_by_one.global_state[k])
               for k in stacked.global_state)


def test_a_round_in_chunks_of_batch_clients_trains_what_one_batch_does(tmp_path, monkeypatch):
    """execution.batch_clients bounds the clients trained together (issue 22: memory)."""
    from pflkit.sdk.algorithms.fedavg import FedAvgTraining

    sizes = []
    fit_batch = FedAvgTraining.fit_batch
    monkeypatch.setattr(FedAvgTraining, "fit_batch",
                        lambda self, g, jobs: sizes.append(len(jobs)) or fit_batch(self, g, jobs))
    whole = run(tmp_path, "fedavg", "batched", "whole", rounds=2)
    assert sizes == [4, 4]
    sizes.clear()
    cfg = config("fedavg", "batched", rounds=2)
    cfg = cfg.replace(execution=ExecutionConfig(executor="batched", batch_clients=3))
    chunked = Simulation(cfg, tmp_path / "chunked", progress=False).run()
    assert sizes == [3, 1, 3, 1]
    assert distance(chunked.global_state, whole.global_state) < 1e-6


def test_the_batched_executor_runs_its_convolutions_as_gemms_when_asked(tmp_path, monkeypatch):
    calls = []
    original = conv_gemm.conv2d_gemm

    def counted(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(conv_gemm, "conv2d_gemm", counted)
    states = {}
    for enabled in (False, True):
        config = device_config("fedavg", "", "cpu", "batched", model="twocnn")
        config = config.replace(execution=ExecutionConfig(executor="batched", conv_gemm=enabled))
        sim = Simulation(config, tmp_path / str(enabled), progress=False)
        sim.run_round()
        states[enabled] = sim.coordinator.global_state
        sim.close()
        assert bool(calls) is enabled  # two convolutions a step, only when asked
    for key, value in states[False].items():
        torch.testing.assert_close(states[True][key], value, rtol=1e-4, atol=1e-5, msg=key)


@pytest.mark.parametrize("algorithm", ["fedavg", "superfed_mm"])
def test_a_compiled_loss_trains_as_the_eager_one(tmp_path, algorithm):
    """``execution.compile_loss``: the step's loss through torch.compile, the same training."""
    from torch._dynamo.utils import counters

    states = {}
    for compiled in (False, True):
        counters.clear()
        config = device_config(algorithm, "", "cpu", "batched")
        config = config.replace(execution=ExecutionConfig(executor="batched",
                                                          compile_loss=compiled))
        sim = Simulation(config, tmp_path / str(compiled), progress=False)
        sim.run_round()
        states[compiled] = sim.coordinator.global_state
        sim.close()
        assert (counters["stats"]["unique_graphs"] > 0) is compiled  # compiled only when asked
    for key, value in states[False].items():
        torch.testing.assert_close(states[True][key], value, rtol=1e-4, atol=1e-5, msg=key)
