"""FedRoD's local training against the paper's equations written out by hand (seed 003).

The reference is eq. 6 taken literally (-log N_y e^{g_y} / sum_c N_c e^{g_c}, N_c = 0 included)
plus eq. 14's personalized cross-entropy with no gradient into theta or psi (App. B.2), on
plain modules and ``torch.optim.SGD``; the trainer, one client at a time and batched, must
land on the same weights after a whole fit.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from pflkit.sdk.algorithms import (
    Choice,
    FitJob,
    LocalTraining,
    ModelFactory,
    RoundContext,
    make_algorithm,
)
from pflkit.sdk.data.tensors import LabeledTensors

TWONN = ModelFactory("twonn", (1, 8, 8), 10)
LENET = ModelFactory("lenet5", (1, 32, 32), 10)  # a head of three FC layers (400-120-84-10)
LOCAL = LocalTraining(epochs=2, batch_size=8, momentum=0.9, weight_decay=1e-3)


def client_data(factory, n, seed, classes=10):
    g = torch.Generator().manual_seed(seed)
    return LabeledTensors(torch.randn(n, *factory.input_shape, generator=g),
                          torch.randint(0, classes, (n,), generator=g))


def balanced_softmax_by_hand(logits, y, counts):
    """Eq. 6 as printed; a class with N_c = 0 gets exactly no softmax mass."""
    weighted = counts.to(logits.dtype) * torch.exp(logits - logits.max(1, keepdim=True).values)
    return -torch.log(weighted.gather(1, y[:, None]).squeeze(1) / weighted.sum(1)).mean()


def paper_fit(algorithm, global_state, data, ctx):
    """Eq. 14 for E epochs with the trainer's batch order; returns the net's final state."""
    net = algorithm.net(global_state).train()
    counts = data.class_counts(10)
    proportions = counts.float() / counts.sum()
    hyper = algorithm.uses_hypernetwork
    own = "hyper." if hyper else "phead."
    params = [p for n, p in net.named_parameters() if n.startswith(("body.", "head.", own))]
    opt = torch.optim.SGD(params, lr=ctx.lr, momentum=LOCAL.momentum,
                          weight_decay=LOCAL.weight_decay)
    batches = ctx.generator("batches")
    for _ in range(LOCAL.epochs):
        order = torch.randperm(len(data), generator=batches)
        for start in range(0, len(data), LOCAL.batch_size):
            idx = order[start:start + LOCAL.batch_size]
            x, y = data.x[idx], data.y[idx]
            z = net.body(x)
            generic = net.head(z)
            phi = net.hyper(proportions) if hyper else dict(net.phead.named_parameters())
            personal = generic.detach() + functional_call(net.phead, phi, (z.detach(),))
            loss = balanced_softmax_by_hand(generic, y, counts) + F.cross_entropy(personal, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    if hyper:
        with torch.no_grad():
            net.phead.load_state_dict(net.hyper(proportions))
    return net.state_dict()


def relative_error(got, want):
    scale = want.abs().max()
    return float((got - want).abs().max() / scale) if scale > 0 else float(got.abs().max())


@pytest.mark.parametrize("factory", [TWONN, LENET], ids=["one-layer-head", "three-layer-head"])
@pytest.mark.parametrize("name", ["fedrod_linear", "fedrod_hyper"])
def test_a_fit_lands_where_eq_6_and_14_by_hand_land(name, factory):
    algorithm = make_algorithm(name, factory, LOCAL, {})
    global_state = algorithm.aggregation.init_global(0)
    # client 0 lacks 7 classes (N_c = 0), client 2 is smaller than a batch
    datas = [client_data(factory, 23, 0, classes=3), client_data(factory, 17, 1),
             client_data(factory, 5, 2, classes=2)]
    states = [algorithm.training.init_client(k, 0, d) for k, d in enumerate(datas)]
    ctxs = [RoundContext(0, 10, 0.05, seed=0, client_id=k) for k in range(len(datas))]
    one_by_one = [algorithm.training.fit(global_state, s, d, c)
                  for s, d, c in zip(states, datas, ctxs, strict=True)]
    together = algorithm.training.fit_together(
        global_state, [FitJob(s, d, c) for s, d, c in zip(states, datas, ctxs, strict=True)])
    for k, (data, ctx) in enumerate(zip(datas, ctxs, strict=True)):
        want = paper_fit(algorithm, global_state, data, ctx)
        for result in (one_by_one[k], together[k]):
            for key, value in result.update.items():
                assert relative_error(value, want[key]) <= 1e-5, (k, key)
            for key, value in result.client_state.tensors.items():  # linear: phi.*
                assert relative_error(value, want["phead." + key.removeprefix("phi.")]) <= 1e-5


def test_every_layer_of_a_deeper_personal_head_learns_and_starts_at_h_p_zero():
    """lenet5's head zeroed throughout: ReLU(0) = 0 would leave only the last bias learning."""
    algorithm = make_algorithm("fedrod_linear", LENET, LOCAL, {})
    global_state = algorithm.aggregation.init_global(0)
    data = client_data(LENET, 24, 0)
    state = algorithm.training.init_client(0, 0, data)
    net = algorithm.net(global_state).eval()
    with torch.no_grad():
        personalized, generic = net(data.x)
    assert torch.equal(personalized, generic)  # the personalized model starts as the generic
    start = dict(net.phead.state_dict())
    for round_index in range(2):
        state = algorithm.training.fit(global_state, state, data,
                                       RoundContext(round_index, 10, 0.05, seed=0,
                                                    client_id=0)).client_state
    phi = {k.removeprefix("phi."): v for k, v in state.tensors.items()}
    assert phi.keys() == start.keys()
    unchanged = [k for k in phi if torch.equal(phi[k], start[k])]
    assert not unchanged, f"personal head tensors that never learned: {unchanged}"


def test_a_deeper_personal_head_trained_alone_after_federation_learns_every_layer():
    """ft_scope = personal_head from a client with no phi yet (a new client of fedrod_linear)."""
    algorithm = make_algorithm("fedrod_linear", LENET, LOCAL,
                               {"ft_epochs": 2, "ft_scope": "personal_head"})
    global_state = algorithm.aggregation.init_global(0)
    data = client_data(LENET, 24, 0)
    state = algorithm.training.init_client(0, 0, data)
    before = algorithm.inference.personalized_model(global_state, state, Choice({}))
    tuned = algorithm.personalization.personalize(global_state, state, data,
                                                  RoundContext(10, 10, 0.05, seed=0, client_id=0))
    start = algorithm.net(global_state).phead.state_dict()
    unchanged = [k for k, v in tuned.tensors.items()
                 if torch.equal(v, start[k.removeprefix("phi.")])]
    assert not unchanged, f"personal head tensors that never learned: {unchanged}"
    with torch.no_grad():
        assert not torch.equal(before(data.x), algorithm.inference.personalized_model(
            global_state, tuned, Choice({}))(data.x))
