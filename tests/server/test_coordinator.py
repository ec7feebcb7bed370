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


def stacked_round(rounds=3):
    """A coordinator whose round samples all 10 clients, and their updates as (10, ...) stacks."""
    algo = make_algorithm("fedavg", FACTORY, LocalTraining())
    coord = Coordinator(algo, Schedule(rounds, Sampling(clients_per_round=10)), list(range(10)),
                        algo.aggregation.init_global(0), seed=5)
    gen = torch.Generator().manual_seed(1)
    stacks = {k: torch.randn(10, *v.shape, generator=gen) for k, v in coord.global_state.items()}
    return coord, stacks


def test_a_stacked_round_equals_the_round_submitted_one_by_one():
    one_by_one, stacks = stacked_round()
    counts = [3 * k + 1 for k in range(10)]
    for k, cid in enumerate(one_by_one.open_round().sampled):
        one_by_one.submit(cid, counts[k], {n: s[k] for n, s in stacks.items()})
    stacked, _ = stacked_round()
    stacked.submit_stacked(stacked.open_round().sampled, counts, stacks)
    assert stacked.open_round().received == one_by_one.open_round().received
    expected, new = one_by_one.close_round(), stacked.close_round()
    assert all(torch.equal(new[k], expected[k]) for k in expected)


@pytest.mark.parametrize("mutate,match", [
    (lambda ids, s: s["head.bias"][7].fill_(float("inf")), "client 7: tensor 'head.bias' has NaN"),
    (lambda ids, s: s.update({"head.bias": s["head.bias"][:, :3]}), "client 0: .* expected"),
    (lambda ids, s: s.pop("head.bias"), "client 0: update lacks tensor"),
    (lambda ids, s: ids.__setitem__(4, 3), "client 3 already sent"),
    (lambda ids, s: ids.__setitem__(4, 99), "client 99 was not sampled"),
])
def test_a_bad_stack_is_refused_naming_its_client_and_folds_nothing(mutate, match):
    coord, stacks = stacked_round()
    ids = list(coord.open_round().sampled)
    mutate(ids, stacks)
    with pytest.raises(UpdateRejected, match=match):
        coord.submit_stacked(ids, [1] * 10, stacks)
    assert coord.open_round().received == {}
    coord.submit_stacked(coord.open_round().sampled[:2], [1, 1],  # the round still takes them
                         {n: s[:2] for n, s in stacked_round()[1].items()})


def test_a_stack_dropping_nonfinite_rows_folds_the_others_as_one_by_one():
    """The simulator's diverged clients: their rows are left out, the rest fold as usual."""
    dropping, stacks = stacked_round()
    stacks["head.bias"][7, 0] = float("nan")
    stacks["body.1.weight"][2].fill_(float("-inf"))
    ids, counts = dropping.open_round().sampled, [3 * k + 1 for k in range(10)]
    assert dropping.submit_stacked(ids, counts, stacks, drop_nonfinite=True) == [2, 7]
    one_by_one, _ = stacked_round()
    for k, cid in enumerate(one_by_one.open_round().sampled):
        if k not in (2, 7):
            one_by_one.submit(cid, counts[k], {n: s[k] for n, s in stacks.items()})
    assert dropping.open_round().received == one_by_one.open_round().received
    assert len(dropping.open_round().received) == 8
    expected, new = one_by_one.close_round(), dropping.close_round()
    assert all(torch.equal(new[k], expected[k]) for k in expected)
