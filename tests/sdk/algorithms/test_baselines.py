"""Faithfulness tests for the comparison baselines: each checks what FedAvg would not do."""

import numpy as np
import pytest
import torch

from pflkit.sdk.algorithms import (
    Choice,
    ClientState,
    HyperparameterError,
    LocalTraining,
    ModelFactory,
    RoundContext,
    make_algorithm,
)
from pflkit.sdk.algorithms.ditto import personal_of
from pflkit.sdk.algorithms.pfedme import BlendedMean
from pflkit.sdk.algorithms.scaffold import CONTROL, DELTA, ScaffoldAggregator, effective_steps
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.run_config import Sampling, Schedule
from pflkit.server.coordinator import Coordinator, UpdateRejected

FACTORY = ModelFactory("twonn", (1, 8, 8), 10)
LOCAL = LocalTraining(epochs=2, batch_size=16, momentum=0.9, weight_decay=1e-4)
NEW_METHODS = ("scaffold", "pfedme", "ditto", "apfl", "fedper", "fedrep", "lg_fedavg")


def tiny_data(n=64, seed=0):
    """Two classes only: a skewed client, so personal parts have something to learn."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.randn(n, 1, 8, 8, generator=g) + y[:, None, None, None].float()
    return LabeledTensors(x, y)


def ctx(round_index=0, lr=0.05, client=0):
    return RoundContext(round_index, 10, lr, seed=0, client_id=client)


def algo(name, local=LOCAL, **params):
    return make_algorithm(name, FACTORY, local, params)


def distance(a, b, keys):
    return float(sum(((a[k] - b[k]) ** 2).sum() for k in keys)) ** 0.5


def model_out(module, x):
    with torch.no_grad():
        return module.eval()(x)


# -- hyperparameters --------------------------------------------------------------------------

@pytest.mark.parametrize(("method", "params", "words"), [
    ("ditto", {"lam": -1.0}, ("ditto", "lam")),
    ("ditto", {"personal_epochs": "two"}, ("ditto", "personal_epochs")),
    ("pfedme", {"inner_steps": 0}, ("pfedme", "inner_steps")),
    ("pfedme", {"lam": "big"}, ("pfedme", "lam")),
    ("pfedme", {"beta": 0.0}, ("pfedme", "beta")),
    ("apfl", {"alpha": 1.5}, ("apfl", "alpha")),
    ("apfl", {"alpha_lr": -0.1}, ("apfl", "alpha_lr")),
    ("scaffold", {"server_lr": 0.0}, ("scaffold", "server_lr")),
    ("scaffold", {"option": 3}, ("scaffold", "option")),
    ("fedrep", {"body_epochs": -1}, ("fedrep", "body_epochs")),
    ("fedrep", {"body_epochs": 3}, ("fedrep", "body_epochs")),  # more than E = 2
    ("fedper", {"head_size": 3}, ("fedper", "head_size")),
    ("lg_fedavg", {"lam": 1}, ("lg_fedavg", "lam")),
])
def test_bad_hyperparameters_name_method_and_parameter(method, params, words):
    with pytest.raises(HyperparameterError) as err:
        algo(method, **params)
    assert all(w in str(err.value) for w in words)


@pytest.mark.parametrize("method", NEW_METHODS)
def test_every_baseline_trains_runs_on_the_coordinator_and_is_deterministic(method):
    a = algo(method, local=LocalTraining(epochs=1, batch_size=16))
    glob = a.aggregation.init_global(seed=0)
    coord = Coordinator(a, Schedule(2, Sampling(clients_per_round=2)), [0, 1], glob, seed=0)
    states = {c: a.training.init_client(c, 0, tiny_data(seed=c)) for c in (0, 1)}
    for r in range(2):
        for cid in coord.open_round().sampled:
            result = a.training.fit(coord.global_state, states[cid], tiny_data(seed=cid),
                                    ctx(r, client=cid))
            again = a.training.fit(coord.global_state, states[cid], tiny_data(seed=cid),
                                   ctx(r, client=cid))
            assert all(torch.equal(result.update[k], again.update[k]) for k in result.update)
            coord.submit(cid, result.num_samples, result.update)
            states[cid] = result.client_state
        coord.close_round()
    x = tiny_data().x[:5]
    for cid in (0, 1):
        logits = model_out(a.inference.personalized_model(coord.global_state, states[cid]), x)
        assert logits.shape == (5, 10) and torch.isfinite(logits).all()
    assert model_out(a.inference.global_model(coord.global_state), x).shape == (5, 10)


# -- FedPer / LG-FedAvg / FedRep: which part travels ------------------------------------------

@pytest.mark.parametrize(("method", "personal", "shared"), [
    ("fedper", "head.", "body."), ("fedrep", "head.", "body."), ("lg_fedavg", "body.", "head."),
])
def test_partial_sharing_never_sends_its_personal_part(method, personal, shared):
    a = algo(method)
    glob = a.aggregation.init_global(seed=0)
    result = a.training.fit(glob, ClientState(), tiny_data(), ctx())
    assert result.update and all(k.startswith(shared) for k in result.update)
    assert result.client_state.tensors and all(k.startswith(personal)
                                               for k in result.client_state.tensors)
    # the personal part was trained and is what the personalized model uses
    keys = list(result.client_state.tensors)
    assert distance(result.client_state.tensors, glob, keys) > 0
    merged = {**glob, **result.update, **result.client_state.tensors}
    x = tiny_data().x[:8]
    expected = a.inference.global_model(merged)
    got = a.inference.personalized_model({**glob, **result.update}, result.client_state)
    assert torch.allclose(model_out(got, x), model_out(expected, x))
    # the server refuses a personal tensor in an upload
    coord = Coordinator(a, Schedule(1, Sampling(clients_per_round=1)), [0], glob, seed=0)
    with pytest.raises(UpdateRejected, match=personal.rstrip(".")):
        coord.submit(0, 64, {**result.update, **result.client_state.tensors})


def test_fedrep_trains_the_head_first_then_the_body():
    a = algo("fedrep", local=LocalTraining(epochs=3, batch_size=16), body_epochs=1)
    glob = a.aggregation.init_global(seed=0)
    model = a.template(glob)
    events = []
    hooks = [p.register_hook(lambda g, part=part: events.append(part) or g)
             for part in ("body", "head") for p in getattr(model, part).parameters()]
    try:
        a.training.fit(glob, ClientState(), tiny_data(), ctx())
    finally:
        for h in hooks:
            h.remove()
    first_body = events.index("body")
    assert events[:first_body] and set(events[:first_body]) == {"head"}
    assert set(events[first_body:]) == {"body"}
    # 2 head epochs, then 1 body epoch of 4 batches each; every layer has weight and bias
    n_head = len(list(model.head.parameters()))
    n_body = len(list(model.body.parameters()))
    assert events.count("head") == 2 * 4 * n_head and events.count("body") == 4 * n_body


def test_fedrep_with_zero_body_epochs_leaves_the_body_untouched():
    a = algo("fedrep", body_epochs=0)
    glob = a.aggregation.init_global(seed=0)
    result = a.training.fit(glob, ClientState(), tiny_data(), ctx())
    assert all(torch.equal(result.update[k], glob[k]) for k in result.update)
    assert distance(result.client_state.tensors, glob, list(result.client_state.tensors)) > 0


# -- SCAFFOLD ---------------------------------------------------------------------------------

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


# -- APFL -------------------------------------------------------------------------------------

def test_apfl_alpha_moves_and_the_personal_model_is_the_alpha_mixture():
    a = algo("apfl", alpha=0.5)
    glob = a.aggregation.init_global(seed=0)
    result = a.training.fit(glob, ClientState(), tiny_data(), ctx())
    alpha = result.client_state.meta["alpha"]
    assert 0.0 <= alpha <= 1.0 and alpha != 0.5
    fixed = algo("apfl", alpha=0.5, adaptive=False).training.fit(glob, ClientState(), tiny_data(),
                                                                 ctx())
    assert fixed.client_state.meta["alpha"] == 0.5
    # personalized model = alpha * v + (1 - alpha) * w_global, checked against a plain module
    new_global = result.update
    v = personal_of(result.client_state)
    mixed = {k: alpha * v[k] + (1 - alpha) * new_global[k] for k in new_global}
    x = tiny_data().x[:8]
    got = model_out(a.inference.personalized_model(new_global, result.client_state), x)
    assert torch.allclose(got, model_out(a.inference.global_model(mixed), x), atol=1e-5)
    # the alpha choice sweeps the mixture: 0 is the global model
    at_zero = model_out(a.inference.personalized_model(new_global, result.client_state,
                                                       Choice({"alpha": 0.0})), x)
    assert torch.allclose(at_zero, model_out(a.inference.global_model(new_global), x), atol=1e-5)


# -- Ditto ------------------------------------------------------------------------------------

def test_ditto_personal_model_differs_from_global_and_approaches_it_as_lambda_grows():
    glob = algo("ditto").aggregation.init_global(seed=0)
    keys = [n for n, _ in FACTORY.build().named_parameters()]
    gaps = []
    for lam in (0.0, 0.5, 5.0):
        result = algo("ditto", lam=lam).training.fit(glob, ClientState(), tiny_data(), ctx())
        v = personal_of(result.client_state)
        gaps.append(distance(v, glob, keys))
        assert distance(v, result.update, keys) > 0  # personal != the model sent to the server
    assert gaps[0] > gaps[1] > gaps[2] > 0
    # the global update is FedAvg's, untouched by the personal step
    fedavg = algo("fedavg").training.fit(glob, ClientState(), tiny_data(), ctx())
    assert all(torch.equal(result.update[k], fedavg.update[k]) for k in glob)


# -- pFedMe -----------------------------------------------------------------------------------

def test_pfedme_personalized_model_differs_from_local_and_global():
    a = algo("pfedme")
    glob = a.aggregation.init_global(seed=0)
    result = a.training.fit(glob, ClientState(), tiny_data(), ctx())
    theta = personal_of(result.client_state)
    keys = list(theta)
    assert distance(theta, glob, keys) > 1e-3
    assert distance(theta, result.update, keys) > 1e-4
    # the local model w moved toward theta from the global one
    assert distance(result.update, glob, keys) > 0
    x = tiny_data().x[:8]
    got = model_out(a.inference.personalized_model(result.update, result.client_state), x)
    assert torch.allclose(got, model_out(a.inference.global_model({**result.update, **theta}), x))


def test_pfedme_server_blends_with_beta():
    glob = {"w": torch.tensor([1.0, 2.0])}
    agg = BlendedMean(glob, beta=0.5)
    agg.add(1.0, {"w": torch.tensor([3.0, 4.0])})
    agg.add(3.0, {"w": torch.tensor([5.0, 0.0])})
    mean = np.average([[3.0, 4.0], [5.0, 0.0]], axis=0, weights=[1.0, 3.0])
    np.testing.assert_allclose(agg.result()["w"].numpy(), 0.5 * np.array([1.0, 2.0]) + 0.5 * mean)
