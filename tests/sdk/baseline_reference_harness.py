"""Helpers of the baseline reference tests (``test_baseline_reference*.py``); no tests here.

A reference is the method's paper written out by hand on plain torch: a module built from a
state, ``torch.optim.SGD`` where the method uses the run's SGD, and the mini-batches drawn as
every pflkit trainer draws them (one ``randperm`` of the purpose's generator per epoch,
consecutive slices of B rows). Each test runs pflkit one client at a time and batched (three
clients of different sizes, one smaller than a batch) and compares tensor by tensor.
"""

from collections.abc import Iterator, Mapping

import torch
from torch import nn

from pflkit.sdk.algorithms import (
    ClientState,
    FitJob,
    FitResult,
    LocalTraining,
    ModelFactory,
    RoundContext,
)
from pflkit.sdk.data.tensors import LabeledTensors

FACTORY = ModelFactory("twonn", (1, 8, 8), 10)
LOCAL = LocalTraining(epochs=2, batch_size=8, momentum=0.9, weight_decay=1e-3)
SIZES = (23, 17, 5)  # steps per epoch 3, 3, 1: the batched trainer's clients finish apart
TOLERANCE = 1e-6  # relative to the largest entry of the tensor


def client_data(n: int, seed: int) -> LabeledTensors:
    """``n`` random rows of the factory's input shape, labels of three classes."""
    g = torch.Generator().manual_seed(seed)
    return LabeledTensors(torch.randn(n, *FACTORY.input_shape, generator=g),
                          torch.randint(0, 3, (n,), generator=g))


def round_of(round_index: int, lr: float = 0.05) -> tuple[list[LabeledTensors],
                                                          list[RoundContext]]:
    """The three clients' data and their contexts of round ``round_index``."""
    datas = [client_data(n, k) for k, n in enumerate(SIZES)]
    ctxs = [RoundContext(round_index, 10, lr, seed=0, client_id=k) for k in range(len(SIZES))]
    return datas, ctxs


def batches(data: LabeledTensors, batch_size: int, generator: torch.Generator
            ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch's mini-batches: a random order, then consecutive slices (the last shorter)."""
    order = torch.randperm(len(data), generator=generator)
    for start in range(0, len(data), batch_size):
        idx = order[start:start + batch_size]
        yield data.x[idx], data.y[idx]


def epochs_of(data: LabeledTensors, epochs: int, generator: torch.Generator
              ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The mini-batches of ``epochs`` epochs in order."""
    for _ in range(epochs):
        yield from batches(data, LOCAL.batch_size, generator)


def net_from(state: Mapping[str, torch.Tensor]) -> nn.Module:
    """A fresh module of the factory's architecture holding a copy of ``state``."""
    net = FACTORY.build()
    net.load_state_dict({k: v.detach().clone() for k, v in state.items()})
    return net.train()


def sgd(params, lr: float) -> torch.optim.SGD:
    """The run's SGD (momentum, weight decay of LOCAL), fresh for one phase."""
    return torch.optim.SGD(list(params), lr=lr, momentum=LOCAL.momentum,
                           weight_decay=LOCAL.weight_decay)


def parameters(net: nn.Module) -> dict[str, torch.Tensor]:
    """The module's parameters, detached copies."""
    return {n: p.detach().clone() for n, p in net.named_parameters()}


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| over max |want| (absolute where want is all zeros)."""
    scale = want.abs().max()
    diff = (got.double() - want.double()).abs().max()
    return float(diff / scale) if scale > 0 else float(diff)


def assert_matches(got: Mapping[str, torch.Tensor], want: Mapping[str, torch.Tensor],
                   what: str, loose: tuple[str, ...] = ()) -> None:
    """Same keys, every tensor within TOLERANCE of the reference.

    Entries named with a ``loose`` prefix are within 10 x TOLERANCE: they are differences of
    weights over a small step (SCAFFOLD's (x - y) / (K lr)), which magnify float rounding.
    """
    assert set(got) == set(want), (what, sorted(set(got) ^ set(want)))
    errors = {k: relative_error(got[k], want[k]) / (10 if k.startswith(loose) else 1)
              for k in want}
    worst = max(errors, key=errors.get, default=None)
    assert worst is None or errors[worst] <= TOLERANCE, (what, worst, errors[worst])


def fit_both_ways(algorithm, global_state, states: list[ClientState],
                  datas: list[LabeledTensors], ctxs: list[RoundContext]
                  ) -> dict[str, list[FitResult]]:
    """The round's results one client at a time and, where the method batches, together."""
    runs = {"one by one": [algorithm.training.fit(global_state, s, d, c)
                           for s, d, c in zip(states, datas, ctxs, strict=True)]}
    if algorithm.training.batching_blocker() is None:
        runs["batched"] = algorithm.training.fit_together(
            global_state, [FitJob(s, d, c) for s, d, c in zip(states, datas, ctxs, strict=True)])
    return runs


def two_rounds(algorithm, reference, loose: tuple[str, ...] = ()) -> int:
    """Check rounds 0 and 1 of every client against ``reference``; return how many runs ran.

    ``reference(global_state, client_state, data, ctx)`` returns (update, client tensors,
    client meta or None); ``loose`` as :func:`assert_matches` takes it. Round 1 starts from
    each client's round-0 state (verified in round 0) and from the global state the method's
    aggregator made of round 0's updates, so what a method carries between rounds is checked.
    """
    global_state = algorithm.aggregation.init_global(0)
    datas, _ = round_of(0)
    states = [algorithm.training.init_client(k, 0, d) for k, d in enumerate(datas)]
    checked = 0
    for round_index in (0, 1):
        _, ctxs = round_of(round_index, lr=0.05 * 0.99 ** round_index)
        runs = fit_both_ways(algorithm, global_state, states, datas, ctxs)
        for k, (state, data, ctx) in enumerate(zip(states, datas, ctxs, strict=True)):
            update, tensors, meta = reference(global_state, state, data, ctx)
            for how, results in runs.items():
                what = f"{algorithm.name} round {round_index} client {k} {how}"
                assert_matches(results[k].update, update, what + " update", loose)
                assert_matches(results[k].client_state.tensors, tensors, what + " state", loose)
                for key, value in (meta or {}).items():
                    got = results[k].client_state.meta[key]
                    assert abs(got - value) <= TOLERANCE * max(1.0, abs(value)), (what, key)
                checked += 1
        states = [r.client_state for r in runs["one by one"]]
        aggregator = algorithm.aggregation.new_aggregator(global_state, len(states))
        for result in runs["one by one"]:
            aggregator.add(result.num_samples, result.update)
        global_state = aggregator.result()
    return checked
