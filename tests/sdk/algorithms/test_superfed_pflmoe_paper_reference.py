"""SuPerFed's round and PFL-MoE's stage 2 against their papers' algorithms written out by hand.

SuPerFed (seed 000, Algorithm 1, eq. 3-4): two plain modules w_f and w_l in ONE SGD, a fresh
lambda ~ U(0, 1) per mini-batch (per layer for LM), loss CE(h(x; W(lambda))) + mu ||w_f -
w_g||^2 + nu cos^2(w_f, w_l); the trainer, one client at a time and batched, must land on the
same w_f and w_l. PFL-MoE (seed 004, Algorithm 2): per epoch one pass over D_per on a copy of
the classifier (extractor frozen), then one pass over D_gate on the gate alone (both experts
frozen), g = sigmoid(Linear(x or a)), mixed logits g C(a) + (1 - g) C_i(a).
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from pflkit.sdk.algorithms import FitJob, LocalTraining, ModelFactory, RoundContext, make_algorithm
from pflkit.sdk.algorithms.pflmoe import split_for_gate
from pflkit.sdk.algorithms.superfed import LOCAL
from pflkit.sdk.data.tensors import LabeledTensors

TWONN = ModelFactory("twonn", (1, 8, 8), 10)
LENET = ModelFactory("lenet5", (1, 32, 32), 10)
SGD = LocalTraining(epochs=2, batch_size=8, momentum=0.9, weight_decay=1e-3)


def client_data(factory, n, seed):
    g = torch.Generator().manual_seed(seed)
    return LabeledTensors(torch.randn(n, *factory.input_shape, generator=g),
                          torch.randint(0, 10, (n,), generator=g))


def relative_error(got, want):
    scale = want.abs().max()
    return float((got - want).abs().max() / scale) if scale > 0 else float(got.abs().max())


def superfed_round_by_hand(algorithm, global_state, client_state, data, ctx):
    """Algorithm 1 from round L on: (w_f, w_l) after E epochs."""
    train, _ = algorithm.split(data, ctx.seed, ctx.client_id)
    federated = algorithm.training.template(global_state)
    local = copy.deepcopy(federated)
    with torch.no_grad():
        for name, p in local.named_parameters():
            p.copy_(client_state.tensors[LOCAL + name])
    names = [n for n, _ in federated.named_parameters()]
    owners: dict[str, int] = {}
    layer_of = [owners.setdefault(n.rpartition(".")[0], len(owners)) for n in names]
    opt = torch.optim.SGD([*federated.parameters(), *local.parameters()], lr=ctx.lr,
                          momentum=SGD.momentum, weight_decay=SGD.weight_decay)
    mu, nu = algorithm.params.mu, algorithm.params.nu
    lambdas, batches = ctx.generator("lambda"), ctx.generator("batches")
    for _ in range(SGD.epochs):
        order = torch.randperm(len(train), generator=batches)
        for start in range(0, len(train), SGD.batch_size):
            idx = order[start:start + SGD.batch_size]
            if algorithm.mixing == "model":
                lam = [torch.rand((), generator=lambdas)] * len(names)
            else:
                per_layer = torch.rand(len(owners), generator=lambdas)
                lam = [per_layer[i] for i in layer_of]
            wf, wl = dict(federated.named_parameters()), dict(local.named_parameters())
            mixed = {n: (1 - lam[i]) * wf[n] + lam[i] * wl[n] for i, n in enumerate(names)}
            ce = F.cross_entropy(functional_call(federated, mixed, (train.x[idx],)), train.y[idx])
            flat_f = torch.cat([wf[n].reshape(-1) for n in names])
            flat_l = torch.cat([wl[n].reshape(-1) for n in names])
            cos = flat_f @ flat_l / (flat_f.norm() * flat_l.norm())
            prox = sum(((wf[n] - global_state[n]) ** 2).sum() for n in names)
            opt.zero_grad()
            (ce + mu * prox + nu * cos**2).backward()
            opt.step()
    return dict(federated.named_parameters()), dict(local.named_parameters())


@pytest.mark.parametrize("name", ["superfed_mm", "superfed_lm"])
def test_a_mixing_round_lands_where_algorithm_1_by_hand_lands(name):
    algorithm = make_algorithm(name, TWONN, SGD, {"mu": 0.05, "nu": 2.0})
    global_state = algorithm.aggregation.init_global(0)
    datas = [client_data(TWONN, n, k) for k, n in enumerate((23, 40, 5))]
    states = [algorithm.training.init_client(k, 0, d) for k, d in enumerate(datas)]
    ctxs = [RoundContext(5, 10, 0.05, seed=0, client_id=k) for k in range(len(datas))]  # L = 4
    one_by_one = [algorithm.training.fit(global_state, s, d, c)
                  for s, d, c in zip(states, datas, ctxs, strict=True)]
    together = algorithm.training.fit_together(
        global_state, [FitJob(s, d, c) for s, d, c in zip(states, datas, ctxs, strict=True)])
    for k in range(len(datas)):
        wf, wl = superfed_round_by_hand(algorithm, global_state, states[k], datas[k], ctxs[k])
        for result in (one_by_one[k], together[k]):
            for n in wf:
                assert relative_error(result.update[n], wf[n].detach()) <= 1e-5, (k, n)
                assert relative_error(result.client_state.tensors[LOCAL + n],
                                      wl[n].detach()) <= 1e-5, (k, n)


def stage_two_by_hand(algorithm, global_state, split_seed, data, ctx):
    """Algorithm 2: (C_i, gate) after E epochs of interleaved passes."""
    p = algorithm.params
    model = algorithm.training.template(global_state).eval()
    extractor, classifier = model.body, model.head
    personal = copy.deepcopy(classifier)
    per_rows, gate_rows = split_for_gate(len(data), p.gate_fraction, split_seed)
    gate = nn.Linear(1024 if p.variant == "mf" else 400, 1)
    nn.init.zeros_(gate.weight)
    nn.init.zeros_(gate.bias)
    head_opt = torch.optim.SGD(personal.parameters(), lr=p.head_lr, momentum=p.momentum,
                               weight_decay=p.weight_decay)
    beta = p.gate_lr or 0.001  # the paper's beta where none is given (always so under fb)
    gate_opt = torch.optim.Adam(gate.parameters(), lr=beta, weight_decay=p.weight_decay) \
        if p.gate_optimizer == "adam" else torch.optim.SGD(
            gate.parameters(), lr=beta, momentum=p.momentum, weight_decay=p.weight_decay)
    head_batches, gate_batches = ctx.generator("pflmoe-classifier"), ctx.generator("pflmoe-gate")

    def passes(rows, gen):
        order = torch.randperm(len(rows), generator=gen)
        for start in range(0, len(rows), p.batch_size):
            idx = rows[order[start:start + p.batch_size]]
            with torch.no_grad():
                a = extractor(data.x[idx])
            yield data.x[idx], a, data.y[idx]

    for _ in range(p.epochs):
        for _, a, y in passes(per_rows, head_batches):
            head_opt.zero_grad()
            F.cross_entropy(personal(a), y).backward()
            head_opt.step()
        if p.variant == "fb":
            continue
        for x, a, y in passes(gate_rows, gate_batches):
            with torch.no_grad():
                global_logits, personal_logits = classifier(a), personal(a)
            g = torch.sigmoid(gate(a if p.variant == "mfe" else x.flatten(1)))
            gate_opt.zero_grad()
            F.cross_entropy(g * global_logits + (1 - g) * personal_logits, y).backward()
            gate_opt.step()
    return personal, gate, extractor, classifier


@pytest.mark.parametrize(("variant", "gate_optimizer"),
                         [("fb", "sgd"), ("mf", "sgd"), ("mfe", "sgd"), ("mfe", "adam")])
def test_stage_two_lands_where_algorithm_2_by_hand_lands(variant, gate_optimizer):
    gate = {} if variant == "fb" else {"gate_lr": 0.02, "gate_optimizer": gate_optimizer}
    algorithm = make_algorithm("pflmoe", LENET, LocalTraining(), {
        "variant": variant, "epochs": 3, "batch_size": 8, "head_lr": 0.01, **gate})
    global_state = algorithm.aggregation.init_global(0)
    data = client_data(LENET, 37, 0)  # D_gate 9 rows, D_per 28: short last batches in both
    state = algorithm.training.init_client(0, 0, data)
    ctx = RoundContext(10, 10, 0.01, seed=0, client_id=0)
    done = algorithm.personalization.personalize(global_state, state, data, ctx)
    personal, gate, extractor, classifier = stage_two_by_hand(
        algorithm, global_state, state.meta["split_seed"], data, ctx)
    want = {f"personal.head.{k}": v for k, v in personal.state_dict().items()}
    if variant != "fb":
        want |= {f"gate.{k}": v for k, v in gate.state_dict().items()}
        assert gate.weight.abs().max() > 0  # the gate did train
    assert done.tensors.keys() == want.keys()
    for key, value in want.items():
        assert relative_error(done.tensors[key], value) <= 1e-5, key
    with torch.no_grad():  # the personalized model is eq. 15 (PFL-FB: C_i alone)
        a = extractor(data.x)
        expected = personal(a)
        if variant != "fb":
            g = torch.sigmoid(gate(a if variant == "mfe" else data.x.flatten(1)))
            expected = g * classifier(a) + (1 - g) * expected
        got = algorithm.inference.personalized_model(global_state, done)(data.x)
    assert relative_error(got, expected) <= 1e-5
