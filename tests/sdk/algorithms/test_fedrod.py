import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fedrod_harness import algo, ctx, tiny_data

from pflkit.sdk.algorithms import Choice, ClientState, HyperparameterError, ModelFactory
from pflkit.sdk.algorithms.fedrod import (
    ZERO_COUNT_LOG_PRIOR,
    ClassDistributionError,
    HyperNetwork,
    balanced_softmax_loss,
    class_proportions,
    fedrod_loss,
    zero_shot_head,
)
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import build_model
from pflkit.sdk.tensorio import save_state
from pflkit.sdk.training import Batch


# -- losses ----------------------------------------------------------------------------------------
def test_bsm_equals_cross_entropy_when_the_client_is_balanced():
    g = torch.Generator().manual_seed(1)
    logits, y = torch.randn(16, 10, generator=g), torch.randint(0, 10, (16,), generator=g)
    assert torch.allclose(balanced_softmax_loss(logits, y, torch.full((10,), 37)),
                          F.cross_entropy(logits, y), atol=1e-6)


def test_bsm_matches_the_formula_of_eq_6():
    g = torch.Generator().manual_seed(2)
    logits, y = torch.randn(8, 5, generator=g), torch.randint(0, 5, (8,), generator=g)
    counts = torch.tensor([3, 40, 7, 1, 12])
    lg, n = logits.double().numpy(), counts.double().numpy()
    expected = np.mean([-np.log(n[t] * np.exp(lg[i, t]) / (n * np.exp(lg[i])).sum())
                        for i, t in enumerate(y.tolist())])
    assert float(balanced_softmax_loss(logits, y, counts)) == pytest.approx(expected, rel=1e-5)


def test_zero_count_classes_give_finite_loss_and_gradients():
    logits = torch.randn(6, 4, requires_grad=True)
    counts = torch.tensor([5, 0, 3, 0])
    for labels in (torch.tensor([0, 2, 0, 2, 0, 2]), torch.tensor([1, 3, 0, 1, 2, 3])):
        loss = balanced_softmax_loss(logits, labels, counts)
        (grad,) = torch.autograd.grad(loss, logits)
        assert math.isfinite(float(loss.detach())) and bool(torch.isfinite(grad).all())
    assert ZERO_COUNT_LOG_PRIOR > -math.inf


def _net_and_batch(name):
    alg = algo(name)
    net = alg.net(alg.aggregation.init_global(0), None)
    data = tiny_data()
    prior = torch.log(data.class_counts(10).clamp_min(1).float())
    phi = net.hyper(torch.full((10,), 0.1)) if name == "fedrod_hyper" \
        else dict(net.phead.named_parameters())
    return net, data, prior, phi


@pytest.mark.parametrize("name", ["fedrod_linear", "fedrod_hyper"])
def test_personalized_loss_sends_no_gradient_into_body_or_generic_head(name):
    net, data, prior, phi = _net_and_batch(name)
    _, l_m = fedrod_loss(net.body, net.head, net.phead, Batch(data.x, data.y), prior, phi)
    l_m.backward()
    assert all(p.grad is None for p in [*net.body.parameters(), *net.head.parameters()])
    personal = net.hyper if name == "fedrod_hyper" else net.phead
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in personal.parameters())


@pytest.mark.parametrize("name", ["fedrod_linear", "fedrod_hyper"])
def test_body_and_generic_head_gradients_come_from_bsm_alone(name):
    net, data, prior, phi = _net_and_batch(name)
    l_br, l_m = fedrod_loss(net.body, net.head, net.phead, Batch(data.x, data.y), prior, phi)
    shared = [*net.body.parameters(), *net.head.parameters()]
    from_bsm = torch.autograd.grad(l_br, shared, retain_graph=True)
    from_total = torch.autograd.grad(l_br + l_m, shared)
    assert all(torch.equal(a, b) for a, b in zip(from_bsm, from_total, strict=True))


# -- hypernetwork ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("model", "shape"), [("twonn", (1, 8, 8)),
                                              ("fedrod_convnet", (1, 28, 28)),
                                              ("lenet5", (3, 32, 32))])
def test_hypernetwork_output_matches_the_head_parameters(model, shape):
    head = build_model(model, shape, 10).head
    hyper = HyperNetwork(10, 16, {k: p.shape for k, p in head.named_parameters()})
    phi = hyper(class_proportions(torch.arange(10.0), 10))
    assert {k: v.shape for k, v in phi.items()} == {k: p.shape for k, p in head.named_parameters()}
    n_head = sum(p.numel() for p in head.parameters())
    assert sum(p.numel() for p in hyper.parameters()) == 10 * 16 + 16 * n_head  # Table 6 layout


# -- federated round -------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "extra"), [("fedrod_linear", set()),
                                             ("fedrod_hyper", {"hyper.fc1.weight",
                                                               "hyper.fc2.weight"})])
def test_aggregation_averages_body_generic_head_and_hypernetwork_only(name, extra):
    alg = algo(name)
    glob = alg.aggregation.init_global(0)
    shared = {k for k in build_model("twonn", (1, 8, 8), 10).state_dict()}
    assert set(glob) == shared | extra
    results = [alg.training.fit(glob, alg.training.init_client(c, 0, tiny_data(seed=c)),
                                tiny_data(30 + 10 * c, c), ctx(client=c)) for c in range(3)]
    assert all(set(r.update) == set(glob) for r in results)
    assert all(set(alg.aggregation.update_schema(glob)) == set(glob) for _ in results)
    agg = alg.aggregation.new_aggregator(glob, 10)
    for r in results:
        agg.add(r.num_samples, r.update)
    out = agg.result()
    for key in glob:
        expected = np.average(np.stack([r.update[key].numpy() for r in results]), axis=0,
                              weights=[r.num_samples for r in results])
        np.testing.assert_allclose(out[key].numpy(), expected, rtol=1e-5, atol=1e-7)
    private = set(results[0].client_state.tensors)
    assert private == ({"phi.weight", "phi.bias"} if name == "fedrod_linear" else set())


def test_linear_phi_stays_on_the_client_and_carries_across_rounds():
    alg = algo("fedrod_linear")
    glob, data = alg.aggregation.init_global(0), tiny_data()
    first = alg.training.fit(glob, alg.training.init_client(0, 0, data), data, ctx(0))
    phi = first.client_state.tensors["phi.weight"]
    assert phi.abs().sum() > 0  # trained away from its zero start
    frozen = alg.training.fit(glob, first.client_state, data, ctx(1, lr=0.0))
    assert torch.equal(frozen.client_state.tensors["phi.weight"], phi)


def test_fit_is_deterministic():
    alg = algo("fedrod_hyper")
    glob, data = alg.aggregation.init_global(0), tiny_data()
    a, b = (alg.training.fit(glob, ClientState(), data, ctx()) for _ in range(2))
    assert all(torch.equal(a.update[k], b.update[k]) for k in a.update)


# -- inference -------------------------------------------------------------------------------------
def test_two_output_model_is_generic_plus_personal_head():
    alg = algo("fedrod_linear")
    data = tiny_data()
    glob = alg.aggregation.init_global(0)
    state = alg.training.fit(glob, alg.training.init_client(0, 0, data), data, ctx()).client_state
    net = alg.inference.generic_and_personalized_model(glob, state)
    personal, generic = net(data.x)
    assert torch.allclose(generic, alg.inference.global_model(glob)(data.x), atol=1e-6)
    z = alg.inference.global_model(glob).body(data.x)
    phi = state.tensors
    assert torch.allclose(personal, generic + F.linear(z, phi["phi.weight"], phi["phi.bias"]),
                          atol=1e-5)
    assert torch.allclose(alg.inference.personalized_model(glob, state)(data.x), personal)


def test_new_client_zero_shot_model_from_its_class_distribution():
    alg = algo("fedrod_hyper")
    glob = alg.aggregation.init_global(0)
    x = tiny_data().x
    counts = torch.tensor([5, 0, 12, 3, 0, 0, 7, 1, 0, 2])
    model = alg.inference.personalized_model(glob, ClientState(),
                                             Choice({"class_distribution": counts}))
    phi = zero_shot_head(glob, counts)
    z = alg.inference.global_model(glob).body(x)
    expected = alg.inference.global_model(glob)(x) + F.linear(z, phi["weight"], phi["bias"])
    assert torch.allclose(model(x), expected, atol=1e-5)
    same = zero_shot_head(glob, counts / counts.sum())  # proportions = counts
    assert all(torch.allclose(same[k], phi[k]) for k in phi)
    other = zero_shot_head(glob, torch.tensor([0, 9, 0, 0, 4, 4, 0, 0, 1, 0]))
    assert not torch.allclose(other["weight"], phi["weight"])
    with pytest.raises(ValueError, match="no class counts"):
        alg.inference.personalized_model(glob, ClientState())


@pytest.mark.parametrize(("model", "shape"), [("twonn", (1, 8, 8)), ("lenet5", (1, 32, 32))])
def test_zero_shot_head_does_not_depend_on_the_order_of_state_keys(model, shape, tmp_path):
    alg = algo("fedrod_hyper", ModelFactory(model, shape, 10))
    glob = alg.aggregation.init_global(0)
    counts = [5, 0, 12, 3, 0, 0, 7, 1, 0, 2]
    reordered = dict(reversed(list(glob.items())))
    save_state(tmp_path / "g.safetensors", glob)
    from pflkit.sdk.tensorio import load_state

    for other in (reordered, load_state(tmp_path / "g.safetensors")):
        a, b = zero_shot_head(glob, counts), zero_shot_head(other, counts)
        assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ClassDistributionError, match="10 entries"):
        linear = algo("fedrod_linear", ModelFactory(model, shape, 10))
        zero_shot_head(linear.aggregation.init_global(0), [1, 2])
    data = LabeledTensors(torch.randn(8, *shape), torch.arange(8))
    trained = alg.inference.personalized_model(glob, alg.training.init_client(0, 0, data))
    loaded = alg.inference.personalized_model(reordered, alg.training.init_client(0, 0, data))
    assert torch.equal(trained(data.x), loaded(data.x))


def test_linear_zero_shot_model_is_the_generic_model():
    alg = algo("fedrod_linear")
    glob, x = alg.aggregation.init_global(0), tiny_data().x
    model = alg.inference.personalized_model(glob, ClientState(),
                                             Choice({"class_distribution": [1.0] * 10}))
    assert torch.allclose(model(x), alg.inference.global_model(glob)(x), atol=1e-6)


def test_new_client_fine_tuning_starts_from_its_zero_shot_head():
    alg = algo("fedrod_hyper", ft_epochs=1)
    glob, data = alg.aggregation.init_global(0), tiny_data()
    assert alg.personalization.has_stage and not algo("fedrod_hyper").personalization.has_stage
    tuned = alg.personalization.personalize(glob, alg.training.init_client(7, 0, data), data,
                                            ctx(10))
    assert {"phi.weight", "local.body.1.weight", "local.head.weight"} <= set(tuned.tensors)
    assert not torch.allclose(tuned.tensors["local.head.weight"], glob["head.weight"])
    choices = alg.inference.evaluation_choices(tuned)
    assert set(choices) == {"", "zero_shot"}
    assert list(choices["zero_shot"].get("class_distribution")) == data.class_counts(10).tolist()


@pytest.mark.parametrize(("bad", "message"), [
    ([1, 2, 3], "10 entries"),
    ([1, -1, 0, 0, 0, 0, 0, 0, 0, 1], "negative"),
    ([0] * 10, "all zero"),
    ([float("nan")] + [1] * 9, "NaN"),
    ([[1] * 10], "10 entries"),
    ([1e308] * 10, "float range"),  # the sum overflowed: a / inf gave a head for all zeros
])
def test_bad_class_distributions_are_refused(bad, message):
    with pytest.raises(ClassDistributionError, match=message):
        class_proportions(bad, 10)


def test_bad_hyperparameters_and_lambda_are_refused():
    with pytest.raises(HyperparameterError, match="hidden"):
        algo("fedrod_hyper", hidden=0)
    with pytest.raises(HyperparameterError, match="hidden"):
        algo("fedrod_linear", hidden=16)
    alg = algo("fedrod_linear")
    with pytest.raises(ValueError, match="declares no choice 'lam'; its choices: class_distr"):
        alg.inference.personalized_model(alg.aggregation.init_global(0), ClientState(),
                                         Choice({"lam": 0.5}))


# -- simulation ------------------------------------------------------------------------------------
def test_simulation_scores_generic_personalized_and_new_clients(tmp_path):
    from pflkit.sdk.run_config import (
        AlgorithmConfig,
        DataConfig,
        ModelConfig,
        SimConfig,
        TrainingConfig,
    )
    from pflkit.server.simulator import Simulation

    config = SimConfig(
        seed=0, rounds=2, eval_interval=1,
        data=DataConfig(dataset="synthetic", kind="dirichlet", num_clients=6, alpha=0.3,
                        test_fraction=0.2, num_new_clients=2),
        model=ModelConfig("twonn"),
        algorithm=AlgorithmConfig("fedrod_hyper", {"ft_epochs": 1, "hidden": 8}),
        training=TrainingConfig(clients_per_round=2, epochs=1, batch_size=20, lr=0.05),
    )
    final = Simulation(config, tmp_path / "run", progress=False).run().final
    assert 0 <= final["global_model"]["top1"] <= 1
    for group in ("clients", "new_clients"):
        by_choice = final[group]["by_choice"]
        assert set(by_choice) == {"", "zero_shot"}
        for summary in by_choice.values():
            assert 0 <= summary["class_weighted_mean"] <= 1
            assert 0 <= summary["own_top1_mean"] <= 1
    assert len(list((tmp_path / "run" / "personalized").glob("*.safetensors"))) == 6
