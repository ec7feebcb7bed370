"""Ops per batched training step, per method: what bounds a captured GPU step (issue 22).

A batched step of a small model (TwoNN, 5 clients x 10 rows) runs each kernel at its ~2-4 us
minimum, so a round replayed as CUDA graphs costs about (kernels per step) x (steps). Two counts
per step, on the CPU, from one round run twice (1 and 2 epochs; per step = the difference over
the extra steps, so the round's setup cancels):

- ``aten``: every ``aten::`` event torch.profiler records inside the steps (nested calls
  included: what the CPU dispatches);
- ``kernels``: the ops that reach a backend kernel (a dispatch mode below autograd and vmap),
  less views and allocations, which launch nothing: about one GPU kernel each.

    cd benchmarks && ../.venv/bin/python step_ops.py [method ...]
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

import pflkit.sdk.batched_training as batched
from pflkit.sdk.algorithms import FitJob, LocalTraining, ModelFactory, RoundContext, make_algorithm
from pflkit.sdk.data.tensors import LabeledTensors

FACTORY = ModelFactory("twonn", (1, 8, 8), 10)
SIZES = (23, 40, 5, 31)  # 3, 5, 1 and 4 batches of 8 per epoch (tests/sdk/test_batched_training)
# (method, params, round): every batched step there is; SuPerFed mixes from round 4 of 10
METHODS = {"fedavg": ({}, 0), "fedprox": ({"mu": 0.1}, 0), "superfed_mm": ({}, 5),
           "superfed_lm": ({}, 5), "fedrod_linear": ({}, 0), "fedrod_hyper": ({}, 0)}
NOT_KERNELS = {"view", "_unsafe_view", "_reshape_alias", "reshape", "t", "transpose", "permute",
               "expand", "select", "slice", "squeeze", "unsqueeze", "split", "split_with_sizes",
               "unbind", "detach", "alias", "as_strided", "movedim", "empty", "empty_like",
               "empty_strided", "promote_types", "scalar_tensor", "lift_fresh", "result_type"}


class _Ops(TorchDispatchMode):
    """Counts the ops that reach a backend (after autograd and vmap have done their work)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def _profiled(counts: dict[str, collections.Counter[str]]
              ) -> Callable[[Callable[[int], None], Any, torch.device], None]:
    """``run_steps`` that records both counts of everything the steps run."""
    real = batched.run_steps

    def run_steps(step: Callable[[int], None], actives: Any, device: torch.device) -> None:
        with profile(activities=[ProfilerActivity.CPU]) as prof, _Ops() as ops:
            real(step, actives, device)
        counts["aten"] = collections.Counter(e.name.removeprefix("aten::") for e in prof.events()
                                             if e.name.startswith("aten::"))
        counts["kernels"] = ops.counts
        counts["steps"] = collections.Counter(steps=len(actives))
    return run_steps


@contextmanager
def _counting(counts: dict[str, collections.Counter[str]]) -> Iterator[None]:
    real = batched.run_steps
    batched.run_steps = _profiled(counts)
    try:
        yield
    finally:
        batched.run_steps = real


def _round(name: str, epochs: int) -> dict[str, collections.Counter[str]]:
    params, round_index = METHODS[name]
    algorithm = make_algorithm(name, FACTORY, LocalTraining(epochs=epochs, batch_size=8), params)
    datas = []
    for k, n in enumerate(SIZES):
        g = torch.Generator().manual_seed(k)
        datas.append(LabeledTensors(torch.randn(n, 1, 8, 8, generator=g),
                                    torch.randint(0, 10, (n,), generator=g)))
    jobs = [FitJob(algorithm.training.init_client(k, 0, d), d,
                   RoundContext(round_index, 10, 0.05, seed=0, client_id=k))
            for k, d in enumerate(datas)]
    counts: dict[str, collections.Counter[str]] = {}
    with _counting(counts):
        algorithm.training.fit_batch(algorithm.aggregation.init_global(0), jobs)
    return counts


def per_step(name: str) -> dict[str, dict[str, float]]:
    """``{"aten": {op: per step}, "kernels": {op: per step}}`` of ``name``'s batched step."""
    one, two = _round(name, 1), _round(name, 2)
    extra = two["steps"]["steps"] - one["steps"]["steps"]
    out = {}
    for kind in ("aten", "kernels"):
        ops = set(one[kind]) | set(two[kind])
        if kind == "kernels":
            ops -= NOT_KERNELS
        diff = {op: (two[kind][op] - one[kind][op]) / extra for op in ops}
        out[kind] = {op: v for op, v in sorted(diff.items(), key=lambda kv: -kv[1]) if v}
    return out


def main(names: list[str]) -> None:
    for name in names or list(METHODS):
        counts = per_step(name)
        top = ", ".join(f"{op} {v:g}" for op, v in list(counts["kernels"].items())[:8])
        print(f"{name}: {sum(counts['aten'].values()):.0f} aten ops/step, "
              f"{sum(counts['kernels'].values()):.0f} kernels/step ({top}, ...)")


if __name__ == "__main__":
    main(sys.argv[1:])
