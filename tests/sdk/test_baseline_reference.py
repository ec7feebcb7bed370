"""FedAvg, FedProx, FedAvg+FT, local-only and the partial-sharing baselines by hand.

FedAvg (McMahan et al. 2017, Alg. 1): w <- w - eta grad l(w; b) over E epochs of B-batches.
FedProx (Li et al. 2020, eq. 2): the local objective adds (mu / 2) ||w - w^t||^2.
FedPer (Arivazhagan et al. 2019, Alg. 1): base and personalization layers trained jointly by
SGD, only the base layers sent. LG-FedAvg (Liang et al. 2020, Alg. 1): the mirror, the local
representation kept, the global head sent. FedRep (Collins et al. 2021, Alg. 1): the head
updated with the representation fixed, then the representation with the new head fixed.
The server of each takes the sample-weighted mean of what was sent (checked for FedAvg).
"""

import pytest
import torch
import torch.nn.functional as F
from baseline_reference_harness import (
    FACTORY,
    LOCAL,
    assert_matches,
    client_data,
    epochs_of,
    net_from,
    sgd,
    two_rounds,
)

from pflkit.sdk.algorithms import LocalTraining, RoundContext, make_algorithm
from pflkit.sdk.models import float_state


def fedprox_by_hand(mu):
    """E epochs of SGD on CE + (mu / 2) ||w - w^t||^2 from the global model; send w."""
    def reference(global_state, client_state, data, ctx):
        net = net_from(global_state)
        anchor = {n: global_state[n] for n, _ in net.named_parameters()}
        opt = sgd(net.parameters(), ctx.lr)
        for x, y in epochs_of(data, LOCAL.epochs, ctx.generator("batches")):
            loss = F.cross_entropy(net(x), y) + mu / 2 * sum(
                ((p - anchor[n]) ** 2).sum() for n, p in net.named_parameters())
            opt.zero_grad()
            loss.backward()
            opt.step()
        return float_state(net), {}, None
    return reference


@pytest.mark.parametrize(("name", "params", "mu"), [
    ("fedavg", {}, 0.0), ("fedprox", {"mu": 0.5}, 0.5), ("fedavg_ft", {}, 0.0)])
def test_fedavg_and_fedprox_fits_equal_the_papers_local_loop(name, params, mu):
    assert two_rounds(make_algorithm(name, FACTORY, LOCAL, params), fedprox_by_hand(mu)) == 12


def test_fedavg_server_takes_the_sample_weighted_mean():
    algorithm = make_algorithm("fedavg", FACTORY, LOCAL, {})
    global_state = algorithm.aggregation.init_global(0)
    updates = [{k: v + k_ for k, v in global_state.items()} for k_ in (1.0, 2.0, 4.0)]
    aggregator = algorithm.aggregation.new_aggregator(global_state, 3)
    for n, update in zip((10, 30, 60), updates, strict=True):
        aggregator.add(n, update)
    want = {k: (10 * updates[0][k] + 30 * updates[1][k] + 60 * updates[2][k]) / 100
            for k in global_state}
    assert_matches(aggregator.result(), want, "fedavg mean")


def test_fedavg_ft_fine_tunes_the_final_global_model_with_the_runs_sgd():
    algorithm = make_algorithm("fedavg_ft", FACTORY, LOCAL, {"ft_epochs": 3, "ft_lr": 0.02})
    global_state = algorithm.aggregation.init_global(0)
    data, ctx = client_data(23, 0), RoundContext(10, 10, 0.05, seed=0, client_id=0)
    tuned = algorithm.personalization.personalize(global_state, algorithm.training.init_client(
        0, 0, data), data, ctx)
    net = net_from(global_state)
    opt = sgd(net.parameters(), 0.02)
    for x, y in epochs_of(data, 3, ctx.generator("fine-tune")):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()
    assert_matches(tuned.tensors, {"personal." + k: v for k, v in float_state(net).items()},
                   "fedavg_ft personal")


def test_local_only_trains_its_own_model_and_sends_nothing():
    def reference(global_state, client_state, data, ctx):
        net = net_from(client_state.tensors)
        opt = sgd(net.parameters(), ctx.lr)
        for x, y in epochs_of(data, LOCAL.epochs, ctx.generator("batches")):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
        return {}, float_state(net), None

    assert two_rounds(make_algorithm("local", FACTORY, LOCAL, {}), reference) == 12


def split(state, personal_prefix):
    """(shared part, personal part) of a state by the personal part's name prefix."""
    shared = {k: v for k, v in state.items() if not k.startswith(personal_prefix)}
    return shared, {k: v for k, v in state.items() if k.startswith(personal_prefix)}


@pytest.mark.parametrize(("name", "personal"), [("fedper", "head."), ("lg_fedavg", "body.")])
def test_fedper_and_lg_fedavg_train_jointly_and_send_the_shared_part(name, personal):
    def reference(global_state, client_state, data, ctx):
        shared_global, personal_global = split(global_state, personal)
        own = client_state.tensors or personal_global  # round 0: the global model's copy
        net = net_from({**shared_global, **own})
        opt = sgd(net.parameters(), ctx.lr)
        for x, y in epochs_of(data, LOCAL.epochs, ctx.generator("batches")):
            opt.zero_grad()
            F.cross_entropy(net(x), y).backward()
            opt.step()
        shared, mine = split(float_state(net), personal)
        return shared, mine, None

    assert two_rounds(make_algorithm(name, FACTORY, LOCAL, {}), reference) == 12


@pytest.mark.parametrize("body_epochs", [1, 2, 0])
def test_fedrep_updates_the_head_with_the_body_fixed_then_the_body(body_epochs):
    local = LocalTraining(epochs=3, batch_size=LOCAL.batch_size, momentum=LOCAL.momentum,
                          weight_decay=LOCAL.weight_decay)

    def reference(global_state, client_state, data, ctx):
        body, head_global = split(global_state, "head.")
        net = net_from({**body, **(client_state.tensors or head_global)})
        phases = [(net.head, local.epochs - body_epochs, "head"),
                  (net.body, body_epochs, "body")]
        for trained, epochs, purpose in phases:  # a fresh SGD per phase
            opt = sgd(trained.parameters(), ctx.lr)
            for x, y in epochs_of(data, epochs, ctx.generator(purpose)):
                opt.zero_grad()
                F.cross_entropy(net(x), y).backward()
                opt.step()
        sent, head = split(float_state(net), "head.")
        if not body_epochs:
            assert all(torch.equal(sent[k], body[k]) for k in body)
        return sent, head, None

    algorithm = make_algorithm("fedrep", FACTORY, local, {"body_epochs": body_epochs})
    assert two_rounds(algorithm, reference) == 12
