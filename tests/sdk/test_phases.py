"""A batched round splits into named profiler phases (benchmarks/gpu_round_profile.py)."""

from torch.profiler import ProfilerActivity, profile

from pflkit.sdk.phases import PREFIX, phase, watching
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ExecutionConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.server.simulator import Simulation

ROUND = {"sample", "tasks", "to_device", "fit", "stack", "grid", "steps", "to_cpu", "fold",
         "results", "aggregate", "metrics", "commit"}


def test_a_profiled_batched_round_records_each_phase_once_steps_inside_fit(tmp_path):
    config = SimConfig(
        seed=0, rounds=2, eval_interval=2, checkpoint_interval=2,
        data=DataConfig(dataset="digits", kind="iid", num_clients=6),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig("fedavg"),
        training=TrainingConfig(clients_per_round=3, epochs=1, batch_size=16),
        execution=ExecutionConfig(executor="batched"))
    sim = Simulation(config, tmp_path / "run", progress=False)
    seen = []
    with profile(activities=[ProfilerActivity.CPU]) as prof, \
            watching(lambda name, entering: seen.append((name, entering))):
        sim.run_round()  # round 0 of 2: no evaluation
    ranges = [e for e in prof.events() if e.name.startswith(PREFIX)]
    assert sorted(e.name[len(PREFIX):] for e in ranges) == sorted(ROUND)
    steps = next(e for e in ranges if e.name == PREFIX + "steps")
    parent = steps.cpu_parent
    while parent.name != PREFIX + "fit":
        parent = parent.cpu_parent
    open_ = []
    for name, entering in seen:  # the watcher sees every phase, entries and exits nested
        if entering:
            open_.append(name)
        else:
            assert open_.pop() == name
    assert not open_ and sorted(n for n, entering in seen if entering) == sorted(ROUND)
    sim.close()


def test_the_watcher_sees_nested_phases_in_order_and_an_exit_on_error():
    seen = []
    try:
        with watching(lambda name, entering: seen.append((name, entering))), phase("outer"):
            with phase("inner"):
                raise KeyError("stop")
    except KeyError:
        pass
    assert seen == [("outer", True), ("inner", True), ("inner", False), ("outer", False)]
    with phase("unwatched"):
        pass
    assert len(seen) == 4
