import numpy as np
import pytest
import torch

from pflkit.sdk.algorithms import (
    ClientState,
    HyperparameterError,
    LocalTraining,
    ModelFactory,
    RoundContext,
    WeightedMean,
    make_algorithm,
)
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.registry import ExtensionError

FACTORY = ModelFactory("twonn", (1, 8, 8), 10)


def tiny_data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return LabeledTensors(torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,),
                                                                              generator=g))


def ctx(round_index=0, lr=0.1, client=0):
    return RoundContext(round_index, 10, lr, seed=0, client_id=client)


def test_weighted_mean_matches_numpy_average():
    rng = np.random.default_rng(0)
    glob = {"w": torch.zeros(3, 2), "n": torch.tensor(0)}
    updates = [({"w": torch.tensor(rng.normal(size=(3, 2)), dtype=torch.float32),
                 "n": torch.tensor(k)}, w) for k, w in zip((1, 4, 7), (5.0, 1.0, 2.0), strict=True)]
    agg = WeightedMean(glob)
    for update, weight in updates:
        agg.add(weight, update)
    out = agg.result()
    expected = np.average(np.stack([u["w"].numpy() for u, _ in updates]), axis=0,
                          weights=[w for _, w in updates])
    np.testing.assert_allclose(out["w"].numpy(), expected, rtol=1e-6)
    assert out["w"].dtype == torch.float32
    assert out["n"].dtype == torch.int64 and int(out["n"]) == round((5 + 4 + 14) / 8)


def test_weighted_mean_without_updates_keeps_the_global_state():
    glob = {"w": torch.ones(2)}
    assert torch.equal(WeightedMean(glob).result()["w"], glob["w"])


def test_fedavg_fit_trains_and_sends_every_weight():
    algo = make_algorithm("fedavg", FACTORY, LocalTraining(epochs=2, batch_size=16))
    glob = algo.aggregation.init_global(seed=0)
    result = algo.training.fit(glob, ClientState(), tiny_data(), ctx())
    assert set(result.update) == set(glob)
    assert result.num_samples == 64 and np.isfinite(result.metrics["train_loss"])
    assert any(not torch.equal(result.update[k], glob[k]) for k in glob)
    again = algo.training.fit(glob, ClientState(), tiny_data(), ctx())
    assert all(torch.equal(result.update[k], again.update[k]) for k in glob)


def test_fedprox_proximal_term_pulls_toward_the_global_model():
    glob = make_algorithm("fedavg", FACTORY, LocalTraining(5, 8)).aggregation.init_global(0)

    def distance(algorithm, mu):
        params = {"mu": mu} if mu is not None else {}
        algo = make_algorithm(algorithm, FACTORY, LocalTraining(5, 8), params)
        out = algo.training.fit(glob, ClientState(), tiny_data(), ctx()).update
        return sum(float(((out[k] - glob[k]) ** 2).sum()) for k in glob)

    assert distance("fedprox", 10.0) < 0.5 * distance("fedavg", None)
    assert distance("fedprox", 0.0) == pytest.approx(distance("fedavg", None), rel=1e-12)


def test_local_only_never_sends_anything_and_keeps_its_model():
    algo = make_algorithm("local", FACTORY, LocalTraining(1, 16))
    glob = algo.aggregation.init_global(0)
    state = algo.training.init_client(3, 0, tiny_data())
    result = algo.training.fit(glob, state, tiny_data(), ctx(client=3))
    assert result.update == {}
    assert set(result.client_state.tensors) == set(glob)
    model = algo.inference.personalized_model(glob, result.client_state)
    own = result.client_state.tensors["head.weight"]
    assert torch.equal(model.state_dict()["head.weight"], own)


def test_fine_tuning_personalizes_from_the_global_model():
    algo = make_algorithm("fedavg_ft", FACTORY, LocalTraining(1, 16), {"ft_epochs": 2})
    glob = algo.aggregation.init_global(0)
    assert algo.personalization.has_stage
    state = algo.personalization.personalize(glob, ClientState(), tiny_data(), ctx(lr=0.05))
    personal = algo.inference.personalized_model(glob, state).state_dict()
    assert not torch.equal(personal["head.weight"], glob["head.weight"])
    untouched = algo.inference.personalized_model(glob, ClientState()).state_dict()
    assert torch.equal(untouched["head.weight"], glob["head.weight"])


@pytest.mark.parametrize(
    "name,params,match",
    [
        ("fedprox", {"mu": "strong"}, "fedprox: hyperparameter 'mu': input should be a valid "
                                      "number, got 'strong'"),
        ("fedprox", {"mu": "0.1"}, "fedprox: hyperparameter 'mu': .* got '0.1'"),  # no coercion
        ("fedprox", {"mu": float("nan")}, "fedprox: hyperparameter 'mu': .*finite"),
        ("fedprox", {"mu": -1.0}, r"fedprox: hyperparameter 'mu' must be in \[0, 1e\+06\]"),
        ("fedprox", {"m": 0.1}, "fedprox: unknown hyperparameter 'm'"),
        ("fedavg", {"mu": 0.1}, "fedavg: takes no hyperparameters"),
        ("fedavg_ft", {"ft_epochs": 1.5}, "fedavg_ft: hyperparameter 'ft_epochs': input should "
                                          "be a valid integer"),
        ("fedavg_ft", {"ft_epochs": True}, "fedavg_ft: hyperparameter 'ft_epochs'"),
        # issue #21: bounded, and an unknown name comes with the closest known one
        ("fedprox", {"mu": 1e300}, r"fedprox: hyperparameter 'mu' must be in \[0, "
                                   r"1e\+06\], got 1e\+300"),
        ("pflmoe", {"epochs": 10**12}, r"pflmoe: hyperparameter 'epochs' must be in \[0, "
                                       r"1000\]"),
        ("pflmoe", {"gate_learning_rate": 0.1},
         r"pflmoe: unknown hyperparameter 'gate_learning_rate' \(did you mean 'gate_lr'\?\)"),
    ],
)
def test_bad_hyperparameters_name_the_method_and_the_parameter(name, params, match):
    with pytest.raises(HyperparameterError, match=match):
        make_algorithm(name, FACTORY, LocalTraining(), params)


def test_nan_is_refused_in_params_built_in_python_too():
    """``mu < 0`` is False for NaN: the range check alone let it through (issue #21)."""
    from pflkit.sdk.algorithms.fedavg import FedProx, FedProxParams

    with pytest.raises(HyperparameterError, match="'mu': input should be a finite number, got nan"):
        FedProx(FACTORY, LocalTraining(), FedProxParams(mu=float("nan")))


def test_an_unknown_algorithm_lists_the_known_ones():
    with pytest.raises(ExtensionError, match="unknown algorithm 'fedsgd'; known: apfl, ditto"):
        make_algorithm("fedsgd", FACTORY, LocalTraining())


def test_personalized_model_rejects_a_lambda_for_methods_without_one():
    from pflkit.sdk.algorithms import Choice

    algo = make_algorithm("fedavg", FACTORY, LocalTraining())
    with pytest.raises(ValueError, match="fedavg declares no choice 'lam'; its choices: none"):
        algo.inference.personalized_model(algo.aggregation.init_global(0), ClientState(),
                                          Choice({"lam": 0.3}))
