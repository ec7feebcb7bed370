"""pFedMe and SCAFFOLD against their papers' algorithms written out by hand.

pFedMe (Dinh et al. 2020, Alg. 1), per mini-batch D: K steps
    theta <- theta - nu (grad f(theta; D) + lambda (theta - w)),
then w <- w - eta lambda (w - theta); the client sends w, the server sets
w_g <- (1 - beta) w_g + beta mean(w_i). SCAFFOLD (Karimireddy et al. 2020, Alg. 1): local
steps y <- y - eta_l (g(y) - c_i + c); c_i+ = g(x) (option I) or c_i - c + (x - y) / (K eta_l)
(option II); the client sends y and Delta c = c_i+ - c_i; the server sets
x <- x + eta_g mean(y_i - x), c <- c + (|S| / N) mean(Delta c_i).
"""

import baseline_reference_harness as harness
import pytest
import torch
import torch.nn.functional as F

from pflkit.sdk.algorithms import make_algorithm
from pflkit.sdk.models import float_state


def pfedme_by_hand(lam, inner_steps, personal_lr):
    """Algorithm 1's client: (w sent, theta kept); theta warm-starts from the last batch's."""
    def reference(global_state, client_state, data, ctx):
        theta_net = harness.net_from(global_state)
        w = harness.parameters(theta_net)
        for x, y in harness.epochs_of(data, harness.LOCAL.epochs, ctx.generator("batches")):
            for _ in range(inner_steps):  # K steps of plain GD on h(theta; w, D)
                theta_net.zero_grad()
                F.cross_entropy(theta_net(x), y).backward()
                with torch.no_grad():
                    for n, p in theta_net.named_parameters():
                        p -= personal_lr * (p.grad + lam * (p - w[n]))
            theta = harness.parameters(theta_net)
            w = {n: w[n] - ctx.lr * lam * (w[n] - theta[n]) for n in w}
        personal = {"personal." + k: t for k, t in float_state(theta_net).items()}
        return w, personal, None
    return reference


@pytest.mark.parametrize("params", [{}, {"lam": 5.0, "inner_steps": 3, "personal_lr": 0.02},
                                    {"inner_steps": 1}])
def test_pfedme_round_equals_algorithm_1(params):
    algorithm = make_algorithm("pfedme", harness.FACTORY, harness.LOCAL, params)
    p = algorithm.params
    assert harness.two_rounds(algorithm, pfedme_by_hand(p.lam, p.inner_steps, p.personal_lr)) == 12


@pytest.mark.parametrize("beta", [1.0, 2.0, 0.5])
def test_pfedme_server_mixes_the_clients_mean_into_the_global_model_by_beta(beta):
    algorithm = make_algorithm("pfedme", harness.FACTORY, harness.LOCAL, {"beta": beta})
    global_state = algorithm.aggregation.init_global(0)
    sent = [(n, {k: v + shift for k, v in global_state.items()})
            for n, shift in ((10, 1.0), (30, -2.0))]
    # the clients' mean as FedAvg weighs it (docs/baselines.md: n-weighted, the public code's)
    mean = {k: (10 * sent[0][1][k] + 30 * sent[1][1][k]) / 40 for k in global_state}
    want = {k: (1 - beta) * global_state[k] + beta * mean[k] for k in global_state}
    for stacked in (False, True):
        harness.assert_matches(aggregated(algorithm, global_state, 10, sent, stacked), want,
                               f"pfedme beta {beta}, stacked {stacked}")


def aggregated(algorithm, global_state, population, sent, stacked):
    """The method's server step over ``sent`` ((n, update) pairs), one by one or stacked.

    The coordinator folds a batched round's updates as (K, ...) stacks (``add_stacked``).
    """
    aggregator = algorithm.aggregation.new_aggregator(global_state, population)
    if stacked:
        aggregator.add_stacked([n for n, _ in sent], {k: torch.stack([u[k] for _, u in sent])
                                                      for k in sent[0][1]})
    else:
        for n, update in sent:
            aggregator.add(n, update)
    return aggregator.result()


def effective_length(steps, momentum):
    """sum_{m=1..K} (1 - beta^m) / (1 - beta): momentum SGD's travel in plain steps."""
    return sum(sum(momentum ** j for j in range(m)) for m in range(1, steps + 1))


def scaffold_by_hand(option):
    """Algorithm 1's client: (y and Delta c sent, c_i+ kept)."""
    def reference(global_state, client_state, data, ctx):
        x = {k: v for k, v in global_state.items() if not k.startswith("control.")}
        c = {k.removeprefix("control."): v for k, v in global_state.items()
             if k.startswith("control.")}
        c_i = {n: client_state.tensors.get("control." + n, torch.zeros_like(t))
               for n, t in c.items()}
        net = harness.net_from(x)
        opt = harness.sgd(net.parameters(), ctx.lr)
        steps = 0
        for xb, yb in harness.epochs_of(data, harness.LOCAL.epochs, ctx.generator("batches")):
            opt.zero_grad()
            F.cross_entropy(net(xb), yb).backward()
            for n, p in net.named_parameters():
                p.grad += c[n] - c_i[n]  # g(y) - c_i + c
            opt.step()
            steps += 1
        y = float_state(net)
        if option == 1:  # the full gradient at x
            at_x = harness.net_from(x)
            F.cross_entropy(at_x(data.x), data.y).backward()
            c_new = {n: p.grad for n, p in at_x.named_parameters()}
        else:
            k = effective_length(steps, harness.LOCAL.momentum)
            c_new = {n: c_i[n] - c[n] + (x[n] - y[n]) / (k * ctx.lr) for n in c}
        sent = y | {"control_delta." + n: c_new[n] - c_i[n] for n in c}
        return sent, {"control." + n: t for n, t in c_new.items()}, None
    return reference


@pytest.mark.parametrize(("params", "runs"), [({}, 12), ({"server_lr": 0.5}, 12),
                                              ({"option": 1}, 6)])
def test_scaffold_round_equals_algorithm_1(params, runs):
    algorithm = make_algorithm("scaffold", harness.FACTORY, harness.LOCAL, params)
    control = ("control.", "control_delta.")  # (x - y) / (K lr): rounding of y magnified
    assert harness.two_rounds(algorithm, scaffold_by_hand(algorithm.params.option), control) == runs


def test_scaffold_server_steps_x_by_eta_g_and_c_by_the_sampled_share():
    algorithm = make_algorithm("scaffold", harness.FACTORY, harness.LOCAL, {"server_lr": 0.5})
    global_state = algorithm.aggregation.init_global(0)
    g = torch.Generator().manual_seed(4)
    global_state = {k: torch.randn(v.shape, generator=g) for k, v in global_state.items()}
    model = [k for k in global_state if not k.startswith("control.")]
    sent = [{**{k: torch.randn(global_state[k].shape, generator=g) for k in model},
             **{"control_delta." + k: torch.randn(global_state[k].shape, generator=g)
                for k in model}} for _ in range(2)]
    want = {k: global_state[k] + 0.5 * ((sent[0][k] + sent[1][k]) / 2 - global_state[k])
            for k in model}
    want |= {"control." + k: global_state["control." + k] + 2 / 8 * (
        sent[0]["control_delta." + k] + sent[1]["control_delta." + k]) / 2 for k in model}
    pairs = list(zip((10, 30), sent, strict=True))  # the sizes 10 and 30 do not weigh in
    for stacked in (False, True):  # N = 8, |S| = 2
        harness.assert_matches(aggregated(algorithm, global_state, 8, pairs, stacked), want,
                       f"scaffold server, stacked {stacked}")
