"""Batched clients train exactly as sequential ones: one round agrees to 1e-5 relative.

Small settings: TwoNN on 8x8 inputs, clients of different sizes (different step counts, short
last batches, one client smaller than a batch), two epochs.
"""

import math

import pytest
import torch
from fake_cuda import FakeCuda, on_device

from pflkit.sdk.algorithms import (
    Algorithm,
    ClientState,
    DeviceTraining,
    FitJob,
    LocalTraining,
    ModelFactory,
    RoundContext,
    make_algorithm,
)
from pflkit.sdk.algorithms.fedavg import FedAvgTraining
from pflkit.sdk.batched_training import BatchGrid, batching_blocker, compiled_loss, compiled_width
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.device import data_to, state_to
from pflkit.sdk.models import build_model

FACTORY = ModelFactory("twonn", (1, 8, 8), 10)
SIZES = (23, 40, 5, 31)  # 3, 5, 1 and 4 batches of 8 per epoch; short last batches
TOTAL_ROUNDS = 10  # SuPerFed mixes from round L = 4


def client_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return LabeledTensors(torch.randn(n, 1, 8, 8, generator=g),
                          torch.randint(0, 10, (n,), generator=g))


def relative_error(got, want):
    """max |got - want| / max |want| (0 when both are zero)."""
    scale = want.abs().max()
    return float((got - want).abs().max() / scale) if scale > 0 else float(got.abs().max())


def jobs_for(algorithm, round_index, states=None):
    datas = [client_data(n, k) for k, n in enumerate(SIZES)]
    states = states or [algorithm.training.init_client(k, 0, d) for k, d in enumerate(datas)]
    return [FitJob(s, d, RoundContext(round_index, TOTAL_ROUNDS, 0.05, seed=0, client_id=k))
            for k, (s, d) in enumerate(zip(states, datas, strict=True))]


def assert_same_results(batched, sequential):
    for got, want in zip(batched, sequential, strict=True):
        assert got.num_samples == want.num_samples
        assert got.update.keys() == want.update.keys()
        for key, value in want.update.items():
            assert relative_error(got.update[key], value) <= 1e-5, key
        assert got.client_state.tensors.keys() == want.client_state.tensors.keys()
        for key, value in want.client_state.tensors.items():
            assert relative_error(got.client_state.tensors[key], value) <= 1e-5, key
        assert got.client_state.meta.keys() == want.client_state.meta.keys()
        for key, value in want.client_state.meta.items():  # APFL's learned alpha: a float
            assert got.client_state.meta[key] == pytest.approx(value, rel=1e-5, abs=1e-8), key
        assert got.metrics.keys() == want.metrics.keys()
        for key, value in want.metrics.items():
            assert math.isclose(got.metrics[key], value, rel_tol=1e-5, abs_tol=1e-8), key


CASES = [
    ("fedavg", {}, 0),
    ("fedprox", {"mu": 0.1}, 0),
    ("fedavg_ft", {}, 0),  # FedAvg's rounds (fine-tuning comes after federation)
    ("pflmoe", {}, 0),  # FedAvg's rounds (stage 2 comes after federation)
    ("superfed_mm", {}, 0),  # before L: FedProx's loss
    ("superfed_mm", {}, 5),  # mixing: one lambda per batch
    ("superfed_lm", {}, 5),  # mixing: one lambda per layer per batch
    ("fedrod_linear", {}, 0),
    ("fedrod_hyper", {}, 0),
    ("ditto", {}, 0),  # w and v of every client as 2K clients of one program
    ("ditto", {"personal_epochs": 1, "lam": 1.0}, 0),  # v's grid shorter than w's
    ("scaffold", {}, 0),  # option II, each client's own K
    ("fedper", {}, 0),
    ("lg_fedavg", {}, 0),
    ("fedrep", {}, 0),  # one head epoch, then one body epoch
    ("fedrep", {"body_epochs": 0}, 0),  # head epochs only: the head's loss is reported
    ("fedrep", {"body_epochs": 2}, 0),  # body epochs only
    ("local", {}, 0),  # every client from its own seeded model
    ("apfl", {}, 0),  # w, v and alpha on one batch: one backward of w's and the mixed loss
    ("apfl", {"adaptive": False, "alpha": 0.3}, 0),  # alpha fixed (float32, as fit's)
    ("apfl", {"alpha_lr": 5.0}, 0),  # alpha's own step size: 3 of 4 alphas clamp to 0
    ("pfedme", {}, 0),  # K inner steps on theta per batch, then w's step
    ("pfedme", {"inner_steps": 1, "lam": 2.0, "personal_lr": 0.1}, 0),
]


@pytest.mark.parametrize(("name", "params", "round_index"), CASES)
def test_one_batched_round_equals_the_sequential_round(name, params, round_index):
    algorithm = make_algorithm(name, FACTORY, LocalTraining(epochs=2, batch_size=8), params)
    assert algorithm.training.batching_blocker() is None
    glob = algorithm.aggregation.init_global(0)
    jobs = jobs_for(algorithm, round_index)
    sequential = [algorithm.training.fit(glob, j.client_state, j.data, j.ctx) for j in jobs]
    assert_same_results(algorithm.training.fit_batch(glob, jobs), sequential)


def test_fedrod_linear_batched_continues_from_each_clients_own_head():
    algorithm = make_algorithm("fedrod_linear", FACTORY, LocalTraining(epochs=1, batch_size=8))
    glob = algorithm.aggregation.init_global(0)
    first = algorithm.training.fit_batch(glob, jobs_for(algorithm, 0))
    states = [r.client_state for r in first]
    assert all(any(k.startswith("phi.") for k in s.tensors) for s in states)
    jobs = jobs_for(algorithm, 1, states)
    sequential = [algorithm.training.fit(glob, j.client_state, j.data, j.ctx) for j in jobs]
    assert_same_results(algorithm.training.fit_batch(glob, jobs), sequential)


@pytest.mark.parametrize("name", ["fedper", "lg_fedavg", "fedrep", "local"])
def test_a_batched_round_continues_from_each_clients_own_part(name):
    """Clients whose personal parts differ start from their own (stacked, not repeated)."""
    algorithm = make_algorithm(name, FACTORY, LocalTraining(epochs=2, batch_size=8))
    glob = algorithm.aggregation.init_global(0)
    states = [r.client_state for r in algorithm.training.fit_batch(glob, jobs_for(algorithm, 0))]
    first, second = states[0].tensors, states[1].tensors
    assert first and all(not torch.equal(first[k], second[k]) for k in first)
    jobs = jobs_for(algorithm, 1, states)
    sequential = [algorithm.training.fit(glob, j.client_state, j.data, j.ctx) for j in jobs]
    assert_same_results(algorithm.training.fit_batch(glob, jobs), sequential)


@pytest.mark.parametrize(("name", "part"), [("ditto", "personal."), ("scaffold", "control."),
                                            ("apfl", "personal.")])
def test_a_batched_second_round_starts_from_the_new_global_and_each_clients_own_state(name,
                                                                                      part):
    """Round 1 after aggregation: Ditto's v toward a new w^t, SCAFFOLD's c_i against c != 0,
    APFL's v and alpha (in meta) from each client's own.

    Three epochs: y_i moves far enough from x that the cancellation in (x - y_i) / (K lr)
    keeps SCAFFOLD's control variates within 1e-5 (one epoch: 1.1e-5 from rounding alone).
    """
    algorithm = make_algorithm(name, FACTORY, LocalTraining(epochs=3, batch_size=8))
    glob = algorithm.aggregation.init_global(0)
    first = algorithm.training.fit_batch(glob, jobs_for(algorithm, 0))
    aggregator = algorithm.aggregation.new_aggregator(glob, len(first))
    for result in first:
        aggregator.add(result.num_samples, result.update)
    glob = aggregator.result()
    states = [r.client_state for r in first]
    assert all(k.startswith(part) for k in states[0].tensors)
    assert all(not torch.equal(v, states[1].tensors[k]) for k, v in states[0].tensors.items())
    assert states[0].meta.get("alpha") != states[1].meta.get("alpha") or name != "apfl"
    jobs = jobs_for(algorithm, 1, states)
    sequential = [algorithm.training.fit(glob, j.client_state, j.data, j.ctx) for j in jobs]
    assert_same_results(algorithm.training.fit_batch(glob, jobs), sequential)


def test_batch_grid_draws_the_batches_sequential_training_draws():
    datas = [client_data(n, k) for k, n in enumerate(SIZES)]
    grid = BatchGrid.build(datas, 2, 8, [torch.Generator().manual_seed(k) for k in range(4)])
    offsets = [0, 23, 63, 68]
    for k, data in enumerate(datas):
        gen = torch.Generator().manual_seed(k)
        expected = [y for _ in range(2) for _, y in data.batches(8, gen)]
        assert grid.steps[k] == len(expected)
        for t, y in enumerate(expected):
            real = grid.weight[k, t] > 0
            assert int(real.sum()) == len(y)
            assert torch.equal(grid.y[grid.rows[k, t][real]], y)
            assert torch.allclose(grid.weight[k, t][real], torch.full((len(y),), 1 / len(y)))
            assert bool((grid.rows[k, t] >= offsets[k]).all())
        assert float(grid.weight[k, len(expected):].abs().sum()) == 0.0


def test_batch_grid_pads_with_each_clients_first_row_at_weight_zero():
    """The grid is laid out for all clients at once (issue 22); padding stays the client's."""
    sizes, epochs = (5, 0, 17, 8), 3
    datas = [client_data(n, k) for k, n in enumerate(sizes)]
    grid = BatchGrid.build(datas, epochs, 8, [torch.Generator().manual_seed(k) for k in range(4)])
    assert grid.steps == (3, 0, 9, 3) and grid.rows.shape == grid.weight.shape == (4, 9, 8)
    for k, first in enumerate((0, 5, 5, 22)):
        per_epoch = grid.steps[k] // epochs
        for e in range(epochs):  # every row of the client once per epoch, padding its first
            rows = grid.rows[k, e * per_epoch : (e + 1) * per_epoch]
            real = grid.weight[k, e * per_epoch : (e + 1) * per_epoch] > 0
            assert sorted(rows[real].tolist()) == list(range(first, first + sizes[k]))
            assert bool((rows[~real] == first).all())
        assert bool((grid.rows[k, grid.steps[k]:] == 0).all())
        assert float(grid.weight[k, grid.steps[k]:].abs().sum()) == 0.0


def test_models_with_batch_norm_or_dropout_are_named_as_blockers():
    assert batching_blocker(build_model("twonn", (1, 8, 8), 10)) is None
    reason = batching_blocker(build_model("mobilenet", (3, 32, 32), 10))
    assert reason is not None and "BatchNorm2d" in reason
    algorithm = make_algorithm("superfed_mm", ModelFactory("mobilenet", (3, 32, 32), 10),
                               LocalTraining())
    assert "superfed_mm on mobilenet" in algorithm.training.batching_blocker()


class OneByOne(DeviceTraining):
    """A method without a batched trainer (every registered method has one): FedAvg's fit."""

    fit = FedAvgTraining.fit
    proximal_strength = 0.0


def test_a_method_without_a_batched_trainer_says_so_and_trains_one_by_one():
    method = type("Unbatched", (Algorithm,), {"name": "unbatched", "Training": OneByOne})
    algorithm = method(FACTORY, LocalTraining(epochs=1, batch_size=8))
    assert algorithm.training.batching_blocker() == "unbatched has no batched trainer"
    glob = algorithm.aggregation.init_global(0)
    jobs = jobs_for(algorithm, 0)
    batched = algorithm.training.fit_batch(glob, jobs)
    sequential = [algorithm.training.fit(glob, j.client_state, j.data, j.ctx) for j in jobs]
    for got, want in zip(batched, sequential, strict=True):
        assert all(torch.equal(got.update[k], want.update[k]) for k in want.update)


def test_a_client_without_rows_keeps_the_global_weights_and_reports_no_loss():
    algorithm = make_algorithm("fedavg", FACTORY, LocalTraining(epochs=1, batch_size=8))
    glob = algorithm.aggregation.init_global(0)
    empty = FitJob(ClientState(), client_data(0, 9), RoundContext(0, 1, 0.05, 0, 9))
    results = algorithm.training.fit_batch(glob, [*jobs_for(algorithm, 0)[:1], empty])
    assert all(torch.equal(results[1].update[k], glob[k]) for k in glob)
    assert math.isnan(results[1].metrics["train_loss"])
    assert algorithm.training.fit_batch(glob, []) == []


@pytest.mark.parametrize(("name", "params", "round_index"), [
    ("fedprox", {"mu": 0.1}, 0), ("superfed_lm", {}, 5), ("fedrod_hyper", {}, 0),
    ("fedrep", {}, 0), ("ditto", {}, 0), ("scaffold", {}, 0), ("apfl", {}, 0),
    ("pfedme", {}, 0)])
def test_the_batched_step_asks_the_device_for_nothing(name, params, round_index):
    """Host syncs per round do not grow with the steps: losses stay on the device (issue 22)."""
    syncs = {}
    for epochs in (1, 3):
        algorithm = make_algorithm(name, FACTORY, LocalTraining(epochs=epochs, batch_size=8),
                                   params)
        with FakeCuda() as fake:
            algorithm.to("cuda")
            glob = state_to(algorithm.aggregation.init_global(0), "cuda")
            jobs = [FitJob(ClientState(state_to(j.client_state.tensors, "cuda"),
                                       j.client_state.meta), data_to(j.data, "cuda"), j.ctx)
                    for j in jobs_for(algorithm, round_index)]
            results = algorithm.training.fit_batch(glob, jobs)
        assert all(on_device(v) for r in results for v in r.update.values())
        syncs[epochs] = fake.syncs + fake.downloads  # a read or a copy to the host
    assert syncs[3] == syncs[1]  # 3x the steps, the same syncs (per client or per round)
    assert not [s for s in syncs[3] if "batched_training" in s]


def test_compiled_widths_cover_every_active_count_with_four_shapes():
    for count in (1, 5, 12, 20, 250):
        widths = {compiled_width(active, count) for active in range(1, count + 1)}
        assert len(widths) <= 4 and max(widths) == count
        for active in range(1, count + 1):
            width = compiled_width(active, count)
            assert active <= width and (width < 2 * active or width == -(-count // 8))


def test_a_compiled_round_traces_widths_not_active_counts_and_trains_as_eager():
    """Steps 3, 3, 2, 1: active counts 4, 3, 2 run as widths 4 (3 clients padded to 4) and 2."""
    from torch._dynamo.utils import counters

    algorithm = make_algorithm("fedprox", FACTORY, LocalTraining(epochs=1, batch_size=8),
                               {"mu": 0.1})
    glob = algorithm.aggregation.init_global(0)
    datas = [client_data(n, k) for k, n in enumerate((23, 20, 13, 5))]
    jobs = [FitJob(algorithm.training.init_client(k, 0, d), d,
                   RoundContext(0, TOTAL_ROUNDS, 0.05, seed=0, client_id=k))
            for k, d in enumerate(datas)]
    eager = algorithm.training.fit_batch(glob, jobs)
    torch._dynamo.reset()
    counters.clear()
    with compiled_loss(True):
        compiled = algorithm.training.fit_batch(glob, jobs)
    assert counters["stats"]["unique_graphs"] == 2
    for got, want in zip(compiled, eager, strict=True):
        for key, value in want.update.items():
            assert relative_error(got.update[key], value) <= 1e-4, key
        assert math.isclose(got.metrics["train_loss"], want.metrics["train_loss"], rel_tol=1e-4)
