"""Each baseline's first step, from its paper's equations in closed form, against pflkit.

One mini-batch holding every row (B = n), one epoch, plain SGD (momentum and weight decay 0),
a client on its first round (its personal part is the global model's copy). Then each paper's
update is a formula in g(x) = grad f(x; D), the batch's mean cross-entropy gradient at x, and
the code's result, one client at a time and batched, must equal it:

- pFedMe (Alg. 1): theta_1 = w - nu g(w), theta_{k+1} = theta_k - nu (g(theta_k) +
  lam (theta_k - w)); w sent = w - eta lam (w - theta_K); theta kept.
- Ditto (Alg. 1): w sent = w - eta g(w); v_1 = w - eta g(w) (v starts at w^t: no pull yet),
  v_2 = v_1 - eta (g(v_1) + lam (v_1 - w)).
- APFL (Alg. 1): v = w at the start, so v_bar = w: w sent = w - eta g(w),
  v kept = w - eta alpha g(w), alpha unchanged (its gradient <v - w, g> is 0).
- FedPer / LG-FedAvg: the whole model takes w - eta g(w); the shared part is sent.
- FedRep (E = 2, body_epochs = 1): head_1 = head - eta g_head(body, head), then
  body_1 = body - eta g_body(body, head_1).
- Local: the client's own model takes theta - eta g(theta); nothing is sent.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from baselines_harness import FACTORY, tiny_data

from pflkit.sdk.algorithms import FitJob, LocalTraining, RoundContext, make_algorithm

ROWS = 24
PLAIN = LocalTraining(epochs=1, batch_size=ROWS, momentum=0.0, weight_decay=0.0)
ETA = 0.1
CTX = RoundContext(0, 10, ETA, seed=0, client_id=0)
TOLERANCE = 2e-6  # relative to the largest entry of a tensor (the batch's rows sum in any order)

State = dict[str, torch.Tensor]


def g(state: State, only: tuple[str, ...] = ("",)) -> State:
    """The batch's mean cross-entropy gradient at ``state`` (parameters named with ``only``)."""
    net = FACTORY.build()
    net.load_state_dict(state)
    data = tiny_data(ROWS)
    params = {n: p for n, p in net.named_parameters() if n.startswith(only)}
    grads = torch.autograd.grad(F.cross_entropy(net(data.x), data.y), list(params.values()))
    return dict(zip(params, grads, strict=True))


def step(state: State, grad: State, size: float) -> State:
    """``state`` with ``size`` times ``grad`` taken from the entries ``grad`` names."""
    return {k: v - size * grad[k] if k in grad else v for k, v in state.items()}


def runs(name: str, params: dict, local: LocalTraining = PLAIN) -> tuple[State, dict[str, list]]:
    """The start (the global model) and the method's first-round result, both ways."""
    algorithm = make_algorithm(name, FACTORY, local, params)
    start, data = algorithm.aggregation.init_global(0), tiny_data(ROWS)
    client = algorithm.training.init_client(0, 0, data)
    done = {"one by one": algorithm.training.fit(start, client, data, CTX),
            "batched": algorithm.training.fit_together(start, [FitJob(client, data, CTX)])[0]}
    return start, done


def assert_close(got: State, want: State, what: str) -> None:
    assert set(got) == set(want), (what, sorted(set(got) ^ set(want)))
    for k, w in want.items():
        scale = max(float(w.abs().max()), 1e-12)
        error = float((got[k].double() - w.double()).abs().max()) / scale
        assert error <= TOLERANCE, (what, k, error)


def personal(state: State) -> State:
    return {"personal." + k: v for k, v in state.items()}


@pytest.mark.parametrize(("lam", "nu", "inner"), [(15.0, 0.05, 1), (4.0, 0.2, 3)])
def test_pfedme_first_step(lam: float, nu: float, inner: int) -> None:
    w, done = runs("pfedme", {"lam": lam, "personal_lr": nu, "inner_steps": inner})
    theta = w
    for _ in range(inner):
        grad = g(theta)
        theta = {k: t - nu * (grad[k] + lam * (t - w[k])) for k, t in theta.items()}
    sent = {k: v - ETA * lam * (v - theta[k]) for k, v in w.items()}
    for how, result in done.items():
        assert_close(result.update, sent, f"pfedme w {how}")
        assert_close(result.client_state.tensors, personal(theta), f"pfedme theta {how}")


def test_ditto_first_step() -> None:
    lam = 3.0
    w, done = runs("ditto", {"lam": lam, "personal_epochs": 2})
    v1 = step(w, g(w), ETA)
    g1 = g(v1)
    v2 = {k: v - ETA * (g1[k] + lam * (v - w[k])) for k, v in v1.items()}
    for how, result in done.items():
        assert_close(result.update, v1, f"ditto w {how}")  # FedAvg's one step
        assert_close(result.client_state.tensors, personal(v2), f"ditto v {how}")


def test_apfl_first_step() -> None:
    alpha = 0.3
    w, done = runs("apfl", {"alpha": alpha, "alpha_lr": 5.0})
    grad = g(w)
    for how, result in done.items():
        assert_close(result.update, step(w, grad, ETA), f"apfl w {how}")
        assert_close(result.client_state.tensors, personal(step(w, grad, ETA * alpha)),
                     f"apfl v {how}")
        assert result.client_state.meta["alpha"] == pytest.approx(alpha, abs=1e-7), how


@pytest.mark.parametrize(("name", "kept"), [("fedper", "head."), ("lg_fedavg", "body.")])
def test_partial_sharing_first_step(name: str, kept: str) -> None:
    w, done = runs(name, {})
    after = step(w, g(w), ETA)
    for how, result in done.items():
        assert_close(result.update, {k: v for k, v in after.items() if not k.startswith(kept)},
                     f"{name} sent {how}")
        assert_close(result.client_state.tensors,
                     {k: v for k, v in after.items() if k.startswith(kept)}, f"{name} kept {how}")


def test_fedrep_first_step() -> None:
    two = LocalTraining(epochs=2, batch_size=ROWS, momentum=0.0, weight_decay=0.0)
    w, done = runs("fedrep", {"body_epochs": 1}, two)
    head = step(w, g(w, ("head.",)), ETA)  # E - body_epochs = 1 head epoch, body frozen
    both = step(head, g(head, ("body.",)), ETA)  # then the body epoch, head frozen
    for how, result in done.items():
        assert_close(result.update, {k: v for k, v in both.items() if k.startswith("body.")},
                     f"fedrep body {how}")
        assert_close(result.client_state.tensors,
                     {k: v for k, v in both.items() if k.startswith("head.")},
                     f"fedrep head {how}")


def test_local_first_step() -> None:
    algorithm = make_algorithm("local", FACTORY, PLAIN, {})
    data = tiny_data(ROWS)
    own = algorithm.training.init_client(0, 0, data)
    want = step(own.tensors, g(own.tensors), ETA)
    glob = algorithm.aggregation.init_global(0)
    for how, result in (("one by one", algorithm.training.fit(glob, own, data, CTX)),
                        ("batched", algorithm.training.fit_together(
                            glob, [FitJob(own, data, CTX)])[0])):
        assert result.update == {}, how
        assert_close(result.client_state.tensors, want, f"local {how}")
