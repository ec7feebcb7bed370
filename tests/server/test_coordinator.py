import pytest
import torch

from pflkit.sdk.algorithms import LocalTraining, ModelFactory, make_algorithm
from pflkit.sdk.lr_schedule import LearningRateSchedule
from pflkit.sdk.run_config import Sampling, Schedule
from pflkit.server.coordinator import Coordinator, UpdateRejected

FACTORY = ModelFactory("twonn", (1, 8, 8), 10)


def coordinator(rounds=3):
    algo = make_algorithm("fedavg", FACTORY, LocalTraining())
    return Coordinator(algo, Schedule(rounds, Sampling(clients_per_round=3)),
                       list(range(10)), algo.aggregation.init_global(0), seed=5)


def test_sampling_is_seeded_per_round_and_without_replacement():
    a, b = coordinator(), coordinator()
    assert a.sample(0) == b.sample(0) and a.sample(1) == b.sample(1)
    assert len(set(a.sample(0))) == 3
    assert any(a.sample(r) != a.sample(0) for r in range(1, 6))


def test_fraction_sampling_and_lr_decay():
    s = Schedule(5, Sampling(fraction=0.2), LearningRateSchedule(0.01, 0.99))
    assert s.sample_size(100) == 20 and s.sample_size(3) == 1
    assert s.lr_at(2) == pytest.approx(0.01 * 0.99**2)


def test_round_aggregates_submitted_updates_weighted_by_samples():
    coord = coordinator()
    first, second = coord.open_round().sampled[:2]
    ones = {k: torch.ones_like(v) for k, v in coord.global_state.items()}
    threes = {k: torch.full_like(v, 3.0) for k, v in coord.global_state.items()}
    coord.submit(first, 30, ones)
    coord.submit(second, 10, threes)
    new = coord.close_round()
    assert coord.round == 1
    assert torch.allclose(new["head.bias"], torch.full((10,), 1.5))


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda u: u.update({"head.bias": torch.zeros(3)}), "expected"),
        (lambda u: u.update({"head.bias": torch.full((10,), float("nan"))}), "NaN or Inf"),
        (lambda u: u.update({"intruder": torch.zeros(1)}), "unexpected tensor"),
        (lambda u: u.pop("head.bias"), "lacks tensor"),
        (lambda u: u.clear(), "lacks tensor"),
        (lambda u: u.update({"head.bias": torch.zeros(10, dtype=torch.float64)}), "float64"),
    ],
)
def test_bad_updates_are_rejected_and_change_nothing(mutate, match):
    coord = coordinator()
    cid = coord.open_round().sampled[0]
    update = {k: v.clone() for k, v in coord.global_state.items()}
    mutate(update)
    with pytest.raises(UpdateRejected, match=match):
        coord.submit(cid, 10, update)
    assert coord.open_round().received == {}


def test_unsampled_and_duplicate_clients_are_rejected():
    coord = coordinator()
    plan = coord.open_round()
    outsider = next(c for c in range(10) if c not in plan.sampled)
    update = {k: v.clone() for k, v in coord.global_state.items()}
    with pytest.raises(UpdateRejected, match="not sampled"):
        coord.submit(outsider, 1, update)
    coord.submit(plan.sampled[0], 1, update)
    with pytest.raises(UpdateRejected, match="already sent"):
        coord.submit(plan.sampled[0], 1, update)


def test_run_finishes_after_its_rounds():
    coord = coordinator(rounds=1)
    coord.open_round()
    coord.close_round()
    assert coord.finished
    with pytest.raises(RuntimeError, match="finished"):
        coord.open_round()
