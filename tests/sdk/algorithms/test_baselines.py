"""Faithfulness tests for the comparison baselines: each checks what FedAvg would not do."""

import numpy as np
import pytest
import torch
from baselines_harness import FACTORY, algo, ctx, distance, model_out, tiny_data

from pflkit.sdk.algorithms import Choice, ClientState, HyperparameterError, LocalTraining
from pflkit.sdk.algorithms.ditto import personal_of
from pflkit.sdk.algorithms.pfedme import BlendedMean
from pflkit.sdk.run_config import Sampling, Schedule
from pflkit.server.coordinator import Coordinator, UpdateRejected

NEW_METHODS = ("scaffold", "pfedme", "ditto", "apfl", "fedper", "fedrep", "lg_fedavg")


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
