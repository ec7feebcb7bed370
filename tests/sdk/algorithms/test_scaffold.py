"""SCAFFOLD's faithfulness: control variates, options I and II, the server's update."""

import numpy as np
import pytest
import torch
from baselines_harness import FACTORY, algo, ctx, distance, tiny_data

from pflkit.sdk.algorithms import ClientState, LocalTraining
from pflkit.sdk.algorithms.scaffold import CONTROL, DELTA, ScaffoldAggregator, effective_steps
from pflkit.sdk.run_config import Sampling, Schedule
from pflkit.server.coordinator import Coordinator


def test_scaffold_global_state_carries_a_control_variate_per_parameter():
    a = algo("scaffold")
    glob = a.aggregation.init_global(seed=0)
    params = [n for n, _ in FACTORY.build().named_parameters()]
    assert sorted(k for k in glob if k.startswith(CONTROL)) == sorted(CONTROL + n for n in params)
    assert all(float(glob[CONTROL + n].abs().sum()) == 0 for n in params)
    schema = a.aggregation.update_schema(glob)
    assert set(schema) == {k for k in glob if not k.startswith(CONTROL)} | {DELTA + n
                                                                          for n in params}


def test_scaffold_without_control_variates_is_fedavg_and_with_them_is_not():
    glob = algo("scaffold").aggregation.init_global(seed=0)
    plain = {k: v for k, v in glob.items() if not k.startswith(CONTROL)}
    fedavg = algo("fedavg").training.fit(plain, ClientState(), tiny_data(), ctx())
    first = algo("scaffold").training.fit(glob, ClientState(), tiny_data(), ctx())
    assert all(torch.allclose(first.update[k], fedavg.update[k], atol=1e-6) for k in plain)
    # a client whose c_i differs from c gets a corrected gradient: a different update
    drifted = {**glob, **{k: torch.full_like(v, 0.05) for k, v in glob.items()
                          if k.startswith(CONTROL)}}
    corrected = algo("scaffold").training.fit(drifted, first.client_state, tiny_data(), ctx())
    assert distance(corrected.update, fedavg.update, plain) > 1e-3


def test_scaffold_option_one_control_variate_is_the_full_gradient_at_the_server_model():
    a = algo("scaffold", option=1)
    glob = a.aggregation.init_global(seed=0)
    data = tiny_data()
    result = a.training.fit(glob, ClientState(), data, ctx())
    model = FACTORY.build()
    model.load_state_dict({k: v for k, v in glob.items() if not k.startswith(CONTROL)})
    torch.nn.functional.cross_entropy(model(data.x), data.y).backward()
    for n, p in model.named_parameters():
        assert torch.allclose(result.client_state.tensors[CONTROL + n], p.grad, atol=1e-6)
        assert torch.allclose(result.update[DELTA + n], p.grad, atol=1e-6)  # c_i was 0


def test_scaffold_defaults_to_option_two():
    assert algo("scaffold").params.option == 2


def test_scaffold_option_one_trains_one_by_one_and_says_why():
    """Option I's full-gradient pass at x has no batched version; option II batches."""
    assert algo("scaffold").training.batching_blocker() is None
    assert algo("scaffold", option=1).training.batching_blocker() == \
        "scaffold option 1 takes a full-gradient pass before training: not batched"


def test_scaffold_option_two_is_the_mean_gradient_along_the_local_steps():
    """Hand computation: plain SGD, two full-batch steps, non-zero c and c_i.

    c_i+ = c_i - c + (x - y) / (K lr) with y = x - lr sum_k (g_k - c_i + c) gives the mean of
    the raw gradients g_1 = g(x), g_2 = g(x - lr (g_1 - c_i + c)), whatever c and c_i are.
    """
    lr, data = 0.1, tiny_data(n=32)
    plain_sgd = LocalTraining(epochs=2, batch_size=32, momentum=0.0, weight_decay=0.0)
    a = algo("scaffold", local=plain_sgd)
    glob = a.aggregation.init_global(seed=0)
    names = [n for n, _ in FACTORY.build().named_parameters()]
    g = torch.Generator().manual_seed(1)
    c = {n: 0.01 * torch.randn(glob[n].shape, generator=g) for n in names}
    c_i = {n: 0.01 * torch.randn(glob[n].shape, generator=g) for n in names}
    glob = {**glob, **{CONTROL + n: c[n] for n in names}}
    start = ClientState({CONTROL + n: c_i[n] for n in names})
    result = a.training.fit(glob, start, data, ctx(lr=lr))

    def gradient(weights):
        model = FACTORY.build()
        model.load_state_dict(weights)
        torch.nn.functional.cross_entropy(model(data.x), data.y).backward()
        return {n: p.grad.detach() for n, p in model.named_parameters()}

    x = {k: v for k, v in glob.items() if not k.startswith(CONTROL)}
    g1 = gradient(x)
    y1 = {**x, **{n: x[n] - lr * (g1[n] - c_i[n] + c[n]) for n in names}}
    g2 = gradient(y1)
    y2 = {n: y1[n] - lr * (g2[n] - c_i[n] + c[n]) for n in names}
    for n in names:
        expected = (g1[n] + g2[n]) / 2
        torch.testing.assert_close(result.client_state.tensors[CONTROL + n], expected,
                                   atol=2e-5, rtol=1e-3)
        torch.testing.assert_close(result.update[DELTA + n], expected - c_i[n],
                                   atol=2e-5, rtol=1e-3)
        torch.testing.assert_close(result.update[n], y2[n], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("momentum", [0.0, 0.5, 0.9])
@pytest.mark.parametrize("steps", [1, 5, 96])
def test_effective_steps_is_how_far_momentum_sgd_moves_under_a_constant_gradient(momentum,
                                                                                steps):
    p = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    gradient, lr = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64), 0.01
    optimizer = torch.optim.SGD([p], lr=lr, momentum=momentum)
    for _ in range(steps):
        p.grad = gradient.clone()
        optimizer.step()
    travelled = -p.detach() / (lr * gradient)
    torch.testing.assert_close(travelled, torch.full((3,), effective_steps(steps, momentum),
                                                     dtype=torch.float64))


def test_scaffold_aggregator_matches_the_paper_update():
    rng = np.random.default_rng(0)
    glob = {"w": torch.tensor(rng.normal(size=(3,)), dtype=torch.float32),
            CONTROL + "w": torch.tensor(rng.normal(size=(3,)), dtype=torch.float32)}
    ys = [rng.normal(size=(3,)) for _ in range(2)]
    dcs = [rng.normal(size=(3,)) for _ in range(2)]
    agg = ScaffoldAggregator(glob, server_lr=0.5, population=10)
    for y, dc, n in zip(ys, dcs, (5.0, 500.0), strict=True):  # sample counts do not weigh in
        agg.add(n, {"w": torch.tensor(y, dtype=torch.float32),
                    DELTA + "w": torch.tensor(dc, dtype=torch.float32)})
    out = agg.result()
    x, c = glob["w"].double().numpy(), glob[CONTROL + "w"].double().numpy()
    np.testing.assert_allclose(out["w"].numpy(), x + 0.5 * (np.mean(ys, axis=0) - x), rtol=1e-5)
    np.testing.assert_allclose(out[CONTROL + "w"].numpy(), c + (2 / 10) * np.mean(dcs, axis=0),
                               rtol=1e-5)


def test_scaffold_control_step_takes_n_from_the_coordinators_population():
    a = algo("scaffold")
    glob = a.aggregation.init_global(seed=0)
    coord = Coordinator(a, Schedule(1, Sampling(clients_per_round=2)), list(range(8)), glob, seed=0)
    deltas = []
    for cid in coord.open_round().sampled:
        result = a.training.fit(glob, ClientState(), tiny_data(seed=cid), ctx(client=cid))
        coord.submit(cid, result.num_samples, result.update)
        deltas.append({k.removeprefix(DELTA): v for k, v in result.update.items()
                       if k.startswith(DELTA)})
    out = coord.close_round()
    for name, delta in deltas[0].items():  # c was 0: c+ = (|S| / N) mean Delta c_i, N = 8
        expected = (2 / 8) * (delta.double() + deltas[1][name].double()) / 2
        torch.testing.assert_close(out[CONTROL + name].double(), expected, rtol=1e-5, atol=1e-7)
