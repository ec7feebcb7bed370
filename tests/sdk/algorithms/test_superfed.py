import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pflkit.sdk.algorithms import (
    Choice,
    HyperparameterError,
    LocalTraining,
    ModelFactory,
    RoundContext,
    make_algorithm,
)
from pflkit.sdk.algorithms.mixing import RuntimeMixture, mix, mix_states
from pflkit.sdk.algorithms.superfed import LAMBDA_GRID, LOCAL, lambda_sweep
from pflkit.sdk.algorithms.superfed_objective import (
    FlatLayout,
    lambda_sampler,
    regularizer,
    superfed_loss,
)
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.models import MODELS, build_model
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.sdk.training import Batch
from pflkit.server.simulator import Simulation

SMALL = ModelFactory("twonn", (1, 8, 8), 10)


def tiny_data(n=60, seed=0, shape=(1, 8, 8)):
    g = torch.Generator().manual_seed(seed)
    return LabeledTensors(torch.randn(n, *shape, generator=g), torch.randint(0, 10, (n,),
                                                                            generator=g))


def ctx(round_index=0, total=10, client=0):
    return RoundContext(round_index, total, 0.05, seed=0, client_id=client)


def algo(name="superfed_mm", factory=SMALL, epochs=1, **params):
    return make_algorithm(name, factory, LocalTraining(epochs=epochs, batch_size=20), params)


# -- reduction to FedAvg / FedProx (paper 3.5) ----------------------------------------------------
@pytest.fixture(scope="module")
def fedavg_global(tmp_path_factory):
    return final_global(tmp_path_factory.mktemp("fedavg"), "fedavg", {})


def final_global(tmp_path, algorithm, params):
    config = SimConfig(
        seed=3, rounds=3, eval_interval=3, checkpoint_interval=3,
        data=DataConfig(dataset="synthetic", kind="shards", num_clients=5, test_fraction=0.2),
        model=ModelConfig("twonn"), algorithm=AlgorithmConfig(algorithm, params),
        training=TrainingConfig(clients_per_round=2, epochs=1, batch_size=20, lr=0.05,
                                lr_decay=0.99, momentum=0.9, weight_decay=1e-4),
    )
    return Simulation(config, tmp_path / algorithm, progress=False).run().global_state


@pytest.mark.parametrize("variant", ["superfed_mm", "superfed_lm"])
def test_lambda_0_nu_0_mu_0_is_fedavg_exactly(tmp_path, fedavg_global, variant):
    never_mix = {"start_fraction": 1.0, "holdout_fraction": 0.0}
    ours = final_global(tmp_path, variant, {"mu": 0.0, "nu": 0.0, **never_mix})
    theirs = fedavg_global
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_lambda_0_nu_0_mu_positive_is_fedprox_with_twice_the_mu(tmp_path, fedavg_global):
    never_mix = {"start_fraction": 1.0, "holdout_fraction": 0.0}
    ours = final_global(tmp_path, "superfed_mm", {"mu": 0.05, "nu": 0.0, **never_mix})
    theirs = final_global(tmp_path, "fedprox", {"mu": 0.1})
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert not torch.equal(ours["head.weight"], fedavg_global["head.weight"])


# -- gradients (eq. 5-6) --------------------------------------------------------------------------
@pytest.mark.parametrize("mixing", ["model", "layer"])
def test_one_backward_gives_the_gradients_of_eq_5_and_6(mixing):
    torch.manual_seed(0)
    model = build_model("twonn", (1, 8, 8), 10, seed=1)
    params = dict(model.named_parameters())
    layout = FlatLayout.of(params)
    wg = layout.flatten(params)
    wf = (wg + 0.05 * torch.randn_like(wg)).requires_grad_()
    wl = layout.flatten(dict(build_model("twonn", (1, 8, 8), 10, seed=2).named_parameters()))
    wl.requires_grad_()
    gen = torch.Generator().manual_seed(5)
    lam = lambda_sampler(mixing, layout, gen)()
    x, y = torch.randn(12, 1, 8, 8), torch.randint(0, 10, (12,))
    mu, nu = 0.3, 2.0
    superfed_loss(model, layout, wf, wl, wg, lam, Batch(x, y), mu, nu).backward()

    # By hand: dCE/dW at W(lambda) from a plain module holding the mixed weights.
    plain = build_model("twonn", (1, 8, 8), 10)
    with torch.no_grad():
        f_parts, l_parts = layout.unflatten(wf.detach()), layout.unflatten(wl.detach())
        for i, (name, p) in enumerate(plain.named_parameters()):
            p.copy_((1 - lam[i]) * f_parts[name] + lam[i] * l_parts[name])
    F.cross_entropy(plain(x), y).backward()
    lam_flat = torch.repeat_interleave(lam, torch.tensor(layout.sizes))
    dce = torch.cat([p.grad.reshape(-1) for p in plain.parameters()])
    f, loc = wf.detach().double(), wl.detach().double()
    nf, nl = f.norm(), loc.norm()
    cos = f @ loc / (nf * nl)
    dcos2_f = 2 * cos * (loc / (nf * nl) - cos * f / nf**2)
    dcos2_l = 2 * cos * (f / (nf * nl) - cos * loc / nl**2)
    expect_f = (1 - lam_flat) * dce + mu * 2 * (f - wg.double()) + nu * dcos2_f
    expect_l = lam_flat * dce + nu * dcos2_l
    assert torch.allclose(wf.grad.double(), expect_f, atol=1e-6)
    assert torch.allclose(wl.grad.double(), expect_l, atol=1e-6)


def test_closed_form_regularizer_backward_equals_autograd_of_the_plain_expression():
    g = torch.Generator().manual_seed(0)
    wf, wl, wg = (torch.randn(300, generator=g, dtype=torch.float64) for _ in range(3))
    a, b = wf.clone().requires_grad_(), wl.clone().requires_grad_()
    (regularizer(a, b, wg, 0.7, 1.5) * 3.0).backward()
    c, d = wf.clone().requires_grad_(), wl.clone().requires_grad_()
    cos = (c @ d) / (c.norm() * d.norm())
    ((0.7 * ((c - wg) ** 2).sum() + 1.5 * cos**2) * 3.0).backward()
    assert torch.allclose(a.grad, c.grad) and torch.allclose(b.grad, d.grad)


def test_layer_mixing_draws_one_lambda_per_layer_model_mixing_one_per_batch():
    layout = FlatLayout.of(dict(build_model("twocnn", (1, 8, 8), 10).named_parameters()))
    gen = torch.Generator().manual_seed(0)
    per_layer = lambda_sampler("layer", layout, gen)()
    by_name = dict(zip(layout.names, per_layer.tolist(), strict=True))
    assert by_name["body.0.weight"] == by_name["body.0.bias"]
    layers = {by_name[f"{owner}.weight"] for owner in ("body.0", "body.3", "body.7", "head")}
    assert len(layers) == 4 and all(0 <= v < 1 for v in layers)
    shared = lambda_sampler("model", layout, gen)()
    assert len(set(shared.tolist())) == 1 and shared.shape == per_layer.shape


# -- the client/server split ----------------------------------------------------------------------
def test_only_the_federated_model_leaves_the_client():
    a = algo(start_fraction=0.0)
    glob = a.aggregation.init_global(0)
    state = a.training.init_client(7, 0, tiny_data())
    assert not torch.equal(state.tensors[LOCAL + "head.weight"], glob["head.weight"])
    result = a.training.fit(glob, state, tiny_data(), ctx(client=7))
    assert result.update.keys() == glob.keys()
    assert all(k.startswith(LOCAL) for k in result.client_state.tensors)
    for name, value in result.update.items():
        assert not torch.equal(value, result.client_state.tensors[LOCAL + name])
    assert not torch.equal(result.client_state.tensors[LOCAL + "head.weight"],
                           state.tensors[LOCAL + "head.weight"])  # w_l trained after L
    assert result.client_state.meta["mixed_rounds"] == 1 and 0 <= result.metrics["cosine"] <= 1


def test_local_model_is_frozen_before_the_start_round():
    a = algo(start_fraction=0.5)
    glob, state = a.aggregation.init_global(0), a.training.init_client(1, 0, tiny_data())
    result = a.training.fit(glob, state, tiny_data(), ctx(round_index=4, total=10))
    assert all(torch.equal(v, state.tensors[k]) for k, v in result.client_state.tensors.items())
    assert result.client_state.meta["mixed_rounds"] == 0
    assert result.num_samples == 54  # 10% of the rows are held out for choosing lambda


# -- personalization and inference modules --------------------------------------------------------
def trained(factory=SMALL, name="superfed_mm", shape=(1, 8, 8)):
    a = algo(name, factory, start_fraction=0.0)
    data = tiny_data(shape=shape)
    glob = a.aggregation.init_global(0)
    result = a.training.fit(glob, a.training.init_client(2, 0, data), data, ctx(client=2))
    return a, result.update, result.client_state, data


@pytest.mark.parametrize("model", sorted(MODELS))
def test_runtime_module_equals_the_baked_module_at_every_lambda(model):
    a, glob, state, _ = trained(ModelFactory(model, (1, 32, 32), 10), shape=(1, 32, 32))
    x = tiny_data(4, seed=9, shape=(1, 32, 32)).x
    runtime = a.inference.personalized_model(glob, state, Choice({"lam": "runtime"}))
    assert isinstance(runtime, RuntimeMixture) and not runtime.training
    assert runtime.two_endpoint  # every registry layer runs with constant weights
    with torch.no_grad():
        for lam in (0.0, 0.3, 0.75, 1.0):
            baked = a.inference.personalized_model(glob, state, Choice({"lam": lam}))
            assert isinstance(baked, type(a.inference.global_model(glob)))
            # outputs blended per layer equal blended weights up to float rounding
            torch.testing.assert_close(runtime(x, torch.tensor([lam])), baked(x),
                                       rtol=1e-5, atol=1e-5)
        assert torch.equal(a.inference.personalized_model(glob, state, Choice({"lam": 0.0}))(x),
                           a.inference.global_model(glob)(x))


def test_runtime_module_falls_back_to_in_graph_weights_for_other_layers():
    torch.manual_seed(0)
    federated = nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.Linear(5, 3))
    local = nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.Linear(5, 3))
    with torch.no_grad():
        local[1].weight.mul_(2.0)
    names = [n for n, _ in federated.named_parameters()]
    runtime = RuntimeMixture(federated, local, names)
    assert not runtime.two_endpoint  # LayerNorm is not linear in its parameters
    x, lam = torch.randn(4, 6), torch.tensor([0.4])
    baked = copy.deepcopy(federated)
    baked.load_state_dict(mix_states(federated, local, names, lam), strict=False)
    with torch.no_grad():
        torch.testing.assert_close(runtime(x, lam), baked(x))


def test_mix_is_exact_at_the_endpoints():
    f, loc = torch.randn(50), torch.randn(50)
    assert torch.equal(mix(f, loc, torch.tensor([0.0])), f)
    assert torch.equal(mix(f, loc, torch.tensor([1.0])), loc)
    assert torch.allclose(mix(f, loc, torch.tensor([0.25])), 0.75 * f + 0.25 * loc)


def test_personalize_picks_a_grid_lambda_on_held_out_train_rows():
    a, glob, state, data = trained(name="superfed_lm")
    chosen = a.personalization.personalize(glob, state, data, ctx(client=2))
    sweep = lambda_sweep(a, glob, chosen, a.split(data, 0, 2)[1])
    assert chosen.meta["lambda"] in LAMBDA_GRID and chosen.meta["lambda_holdout_rows"] == 6
    assert sweep[chosen.meta["lambda"]].top1 == max(s.top1 for s in sweep.values())
    x = data.x[:5]
    with torch.no_grad():
        assert torch.equal(a.inference.personalized_model(glob, chosen, Choice({"lam": "best"}))(x),
                           a.inference.personalized_model(
                               glob, chosen, Choice({"lam": chosen.meta["lambda"]}))(x))
    choices = list(a.inference.evaluation_choices(chosen))
    assert choices[0] == "best" and choices[1:] == [f"{lam:.1f}" for lam in LAMBDA_GRID]
    assert list(algo(sweep=False).inference.evaluation_choices(chosen)) == ["best"]


def test_holdout_split_is_fixed_per_client_and_disjoint():
    a = algo()
    data = LabeledTensors(torch.arange(50.0).view(50, 1, 1, 1), torch.zeros(50, dtype=torch.long))
    fit_rows, held = a.split(data, 0, 4)
    again, _ = a.split(data, 0, 4)
    other, _ = a.split(data, 0, 5)
    assert torch.equal(fit_rows.x, again.x) and not torch.equal(fit_rows.x, other.x)
    assert len(held) == 5
    assert set(fit_rows.x.flatten().tolist()).isdisjoint(held.x.flatten().tolist())


@pytest.mark.parametrize("lam", [1.5, -0.1, "middle"])
def test_bad_lambda_is_refused(lam):
    a, glob, state, _ = trained()
    with pytest.raises(ValueError, match=r"lam must be a number in \[0, 1\], 'best', 'runtime'"):
        a.inference.personalized_model(glob, state, Choice({"lam": lam}))


def test_best_before_personalize_and_class_distribution_are_refused():
    a, glob, state, _ = trained()
    with pytest.raises(ValueError, match="run personalize first"):
        a.inference.personalized_model(glob, state, Choice({"lam": "best"}))
    with pytest.raises(ValueError, match="declares no choice 'class_distribution'"):
        a.inference.personalized_model(glob, state, Choice({"class_distribution": torch.ones(10)}))
    with pytest.raises(ValueError, match="does not match"):
        a.inference.personalized_model(glob, type(state)({}, {}), Choice({"lam": 0.5}))


@pytest.mark.parametrize("params, word", [({"mu": -1.0}, "mu"), ({"nu": -0.5}, "nu"),
                                          ({"start_fraction": 2.0}, "start_fraction"),
                                          ({"holdout_fraction": 1.0}, "holdout_fraction"),
                                          ({"lam": 0.5}, "lam")])
def test_bad_hyperparameters_name_method_and_parameter(params, word):
    with pytest.raises(HyperparameterError, match=word):
        algo(**params)


def test_fit_with_batchnorm_keeps_the_clients_running_statistics():
    a, glob, state, _ = trained(ModelFactory("mobilenet", (1, 32, 32), 10), shape=(1, 32, 32))
    stats = [k for k in glob if k.endswith("running_mean")]
    assert stats and all(torch.equal(state.tensors[LOCAL + k], glob[k]) for k in stats)
    assert not any(k.endswith("num_batches_tracked") for k in state.tensors)
    with torch.no_grad():
        model = a.inference.personalized_model(glob, state, Choice({"lam": 0.5}))
        out = model(torch.zeros(1, 1, 32, 32))
    assert not math.isnan(float(out.sum()))
