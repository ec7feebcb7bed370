"""APFL and Ditto against their papers' client updates written out by hand.

APFL (Deng et al. 2020, Alg. 1 and eq. 5), per mini-batch xi with step size eta:
    w <- w - eta grad f(w; xi)
    v <- v - eta grad_v f(v_bar; xi),        v_bar = alpha v + (1 - alpha) w  (grad_v = alpha g)
    alpha <- alpha - eta_alpha <v - w, g>,   g = grad f(v_bar; xi)   (all at the step's start)
personalized model alpha v + (1 - alpha) w. Ditto (Li et al. 2021, Alg. 1): w updated as
FedAvg from w^t and sent; v <- v - eta (grad F_k(v) + lambda (v - w^t)) for s iterations, v
kept. Both with the run's SGD (momentum, weight decay) where the papers write plain steps.
"""

import pytest
import torch
import torch.nn.functional as F
from baseline_reference_harness import (
    FACTORY,
    LOCAL,
    client_data,
    epochs_of,
    net_from,
    parameters,
    sgd,
    two_rounds,
)
from torch.func import functional_call

from pflkit.sdk.algorithms import (
    Choice,
    ClientState,
    HyperparameterError,
    RoundContext,
    make_algorithm,
)
from pflkit.sdk.models import float_state


def apfl_by_hand(algorithm, adaptive, alpha_lr):
    """Algorithm 1 of APFL on plain modules; returns (w sent, v kept, alpha)."""
    def reference(global_state, client_state, data, ctx):
        w_net = net_from(global_state)
        start = {k.removeprefix("personal."): v for k, v in client_state.tensors.items()}
        v_net = net_from(start or global_state)  # v starts as the first global model
        alpha = client_state.meta.get("alpha", algorithm.params.alpha)
        eta_alpha = ctx.lr if alpha_lr is None else alpha_lr
        opt_w, opt_v = sgd(w_net.parameters(), ctx.lr), sgd(v_net.parameters(), ctx.lr)
        for x, y in epochs_of(data, LOCAL.epochs, ctx.generator("batches")):
            w, v = parameters(w_net), parameters(v_net)  # the step's start
            v_bar = {n: (alpha * v[n] + (1 - alpha) * w[n]).requires_grad_() for n in w}
            g = dict(zip(v_bar, torch.autograd.grad(
                F.cross_entropy(functional_call(w_net, v_bar, (x,)), y), list(v_bar.values())),
                strict=True))
            opt_w.zero_grad()
            F.cross_entropy(w_net(x), y).backward()
            opt_w.step()
            for n, p in v_net.named_parameters():
                p.grad = alpha * g[n]  # chain rule through v_bar
            opt_v.step()
            if adaptive:
                grad_alpha = sum(float(((v[n] - w[n]) * g[n]).sum()) for n in w)
                alpha = min(1.0, max(0.0, alpha - eta_alpha * grad_alpha))
        personal = {"personal." + k: t for k, t in float_state(v_net).items()}
        return float_state(w_net), personal, {"alpha": alpha}
    return reference


@pytest.mark.parametrize("params", [{}, {"alpha": 0.25, "alpha_lr": 0.5},
                                    {"alpha": 0.9, "alpha_lr": 9.0},  # clipped at 1 and 0
                                    {"alpha": 0.7, "adaptive": False}])
def test_apfl_round_equals_algorithm_1(params):
    algorithm = make_algorithm("apfl", FACTORY, LOCAL, params)
    reference = apfl_by_hand(algorithm, algorithm.params.adaptive, algorithm.params.alpha_lr)
    assert two_rounds(algorithm, reference) == 12


def test_apfl_refuses_a_step_size_for_a_fixed_alpha():
    """adaptive = false takes no alpha step: an alpha_lr given there would look used."""
    with pytest.raises(HyperparameterError, match="apfl: hyperparameter 'alpha_lr' must be "
                       "unset while adaptive = false"):
        make_algorithm("apfl", FACTORY, LOCAL, {"adaptive": False, "alpha_lr": 0.1})
    assert make_algorithm("apfl", FACTORY, LOCAL, {"adaptive": True, "alpha_lr": 0.1})


def test_apfl_alpha_moves_by_the_inner_product_of_v_minus_w_and_the_mixed_gradient():
    """A large eta_alpha: every step's alpha change is visible, so a wrong sign or factor shows."""
    algorithm = make_algorithm("apfl", FACTORY, LOCAL, {"alpha": 0.5, "alpha_lr": 5.0})
    global_state = algorithm.aggregation.init_global(0)
    data = client_data(23, 0)
    shifted = {"personal." + k: v + 0.05 * torch.randn(v.shape, generator=torch.Generator()
                                                       .manual_seed(1))
               for k, v in global_state.items()}
    state = ClientState(shifted, {"alpha": 0.5})
    ctx = RoundContext(3, 10, 0.05, seed=0, client_id=0)
    got = algorithm.training.fit(global_state, state, data, ctx).client_state.meta["alpha"]
    _, _, want = apfl_by_hand(algorithm, True, 5.0)(global_state, state, data, ctx)
    assert got != 0.5 and abs(got - want["alpha"]) <= 1e-6


def test_apfl_personalized_model_is_the_alpha_mixture_with_the_global_model():
    algorithm = make_algorithm("apfl", FACTORY, LOCAL, {})
    global_state = algorithm.aggregation.init_global(0)
    g = torch.Generator().manual_seed(2)
    v = {k: torch.randn(t.shape, generator=g) for k, t in global_state.items()}
    state = ClientState({"personal." + k: t for k, t in v.items()}, {"alpha": 0.3})
    x = client_data(5, 0).x
    for choice, alpha in ((None, 0.3), (Choice({"alpha": 0.8}), 0.8)):
        mixed = net_from({k: alpha * v[k] + (1 - alpha) * global_state[k] for k in v}).eval()
        with torch.no_grad():
            got = algorithm.inference.personalized_model(global_state, state, choice).eval()(x)
            assert torch.allclose(got, mixed(x), rtol=1e-6, atol=1e-6)


def ditto_by_hand(lam, personal_epochs):
    """Algorithm 1 of Ditto: (FedAvg's w, v after its epochs toward w^t)."""
    def reference(global_state, client_state, data, ctx):
        w_net = net_from(global_state)
        opt = sgd(w_net.parameters(), ctx.lr)
        for x, y in epochs_of(data, LOCAL.epochs, ctx.generator("batches")):
            opt.zero_grad()
            F.cross_entropy(w_net(x), y).backward()
            opt.step()
        start = {k.removeprefix("personal."): v for k, v in client_state.tensors.items()}
        v_net = net_from(start or global_state)
        opt = sgd(v_net.parameters(), ctx.lr)
        for x, y in epochs_of(data, personal_epochs, ctx.generator("personal")):
            loss = F.cross_entropy(v_net(x), y) + lam / 2 * sum(
                ((p - global_state[n]) ** 2).sum() for n, p in v_net.named_parameters())
            opt.zero_grad()
            loss.backward()
            opt.step()
        personal = {"personal." + k: t for k, t in float_state(v_net).items()}
        return float_state(w_net), personal, None
    return reference


@pytest.mark.parametrize(("params", "personal_epochs"), [
    ({}, LOCAL.epochs), ({"lam": 2.0, "personal_epochs": 3}, 3),
    ({"lam": 0.5, "personal_epochs": 1}, 1)])
def test_ditto_round_equals_algorithm_1(params, personal_epochs):
    algorithm = make_algorithm("ditto", FACTORY, LOCAL, params)
    assert two_rounds(algorithm, ditto_by_hand(algorithm.params.lam, personal_epochs)) == 12


def test_ditto_personalized_model_is_v():
    algorithm = make_algorithm("ditto", FACTORY, LOCAL, {})
    global_state = algorithm.aggregation.init_global(0)
    g = torch.Generator().manual_seed(3)
    v = {k: torch.randn(t.shape, generator=g) for k, t in global_state.items()}
    state = ClientState({"personal." + k: t for k, t in v.items()})
    x = client_data(5, 0).x
    with torch.no_grad():
        got = algorithm.inference.personalized_model(global_state, state).eval()(x)
        assert torch.allclose(got, net_from(v).eval()(x), rtol=1e-6, atol=1e-6)
