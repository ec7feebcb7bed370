"""Seeded model initializations are the same in threads running side by side as alone."""

from concurrent.futures import ThreadPoolExecutor

import torch

from pflkit.sdk.models import build_model


def weights(seed: int) -> torch.Tensor:
    model = build_model("twocnn", (1, 28, 28), 10, seed=seed)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_models_built_in_parallel_threads_get_their_own_seeds_draws():
    alone = {seed: weights(seed) for seed in range(4)}
    with ThreadPoolExecutor(4) as threads:
        together = list(threads.map(weights, [s for _ in range(6) for s in range(4)]))
    for index, got in enumerate(together):
        assert torch.equal(got, alone[index % 4]), index
