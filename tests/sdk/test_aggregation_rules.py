"""Aggregation rules shared by pfl-sim and pfl-server, checked against numpy/scipy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.aggregation_rules import (
    AggregatorFactory,
    ClippedAggregator,
    RobustAggregator,
    clip_update,
    coordinate_median,
    trimmed_mean,
)
from pflkit.sdk.algorithms.base import WeightedMean
from pflkit.sdk.run_config import Schedule


def states(k: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [{"w": torch.randn(5, 7, generator=gen), "b": torch.randn(3, generator=gen)}
            for _ in range(k)]


def test_clip_update_scales_the_change_to_the_bound():
    g, u = states(2)
    delta = np.concatenate([(u[k] - g[k]).numpy().ravel() for k in ("w", "b")])
    norm = np.linalg.norm(delta)
    clipped = clip_update(g, u, norm / 4)
    new = np.concatenate([(clipped[k] - g[k]).numpy().ravel() for k in ("w", "b")])
    np.testing.assert_allclose(new, delta / 4, rtol=1e-5, atol=1e-6)
    assert clip_update(g, u, norm * 2) is u  # inside the bound: untouched


@pytest.mark.parametrize("k", [1, 4, 7])
def test_median_and_trimmed_mean_match_numpy_and_scipy(k):
    values = np.random.default_rng(k).normal(size=(k, 50))
    np.testing.assert_allclose(coordinate_median(values), np.median(values, axis=0))
    np.testing.assert_allclose(trimmed_mean(values, 0.2), stats.trim_mean(values, 0.2, axis=0))


def test_trimmed_mean_refuses_to_trim_everything():
    with pytest.raises(ValueError, match="leaves nothing"):
        trimmed_mean(np.zeros((2, 3)), 0.5)


@pytest.mark.parametrize("rule", ["median", "trimmed_mean"])
def test_robust_aggregator_streams_chunks_and_cleans_up(tmp_path, rule):
    g, *updates = states(6, seed=1)
    agg = RobustAggregator(g, rule, tmp_path, trim_fraction=0.2, chunk=4)
    for u in updates:
        agg.add(1.0, u)
    out = agg.result()
    for key in g:
        stacked = np.stack([u[key].numpy().ravel() for u in updates]).astype(np.float64)
        expected = np.median(stacked, axis=0) if rule == "median" else \
            stats.trim_mean(stacked, 0.2, axis=0)
        np.testing.assert_allclose(out[key].numpy().ravel(), expected, rtol=1e-6)
        assert out[key].dtype == g[key].dtype
    assert list(tmp_path.iterdir()) == []


def test_clipped_mean_equals_numpy_average_of_clipped_updates(tmp_path):
    g, *updates = states(4, seed=2)
    weights = [1.0, 3.0, 2.0]
    build = AggregatorFactory(lambda s, _: WeightedMean(s), AggregationConfig(clip_norm=0.5),
                               tmp_path, Schedule(1), seed=0)
    agg = build(g, 3, 0)
    assert isinstance(agg, ClippedAggregator)
    for w, u in zip(weights, updates, strict=True):
        agg.add(w, u)
    out = agg.result()
    for key in g:
        clipped = [clip_update(g, u, 0.5)[key].numpy() for u in updates]
        np.testing.assert_allclose(out[key].numpy(), np.average(clipped, axis=0,
                                                                weights=weights), rtol=1e-5)


@pytest.mark.parametrize("run, floor, stricter", [
    (AggregationConfig(), AggregationConfig(), AggregationConfig()),
    (AggregationConfig("median"), AggregationConfig(), AggregationConfig("median")),
    (AggregationConfig(), AggregationConfig("trimmed_mean", 0.2),
     AggregationConfig("trimmed_mean", 0.2)),
    (AggregationConfig("trimmed_mean", 0.3), AggregationConfig("trimmed_mean", 0.2),
     AggregationConfig("trimmed_mean", 0.3)),
    (AggregationConfig("trimmed_mean", 0.3), AggregationConfig("median", 0.1),
     AggregationConfig("median", 0.1)),
    (AggregationConfig(clip_norm=2.0), AggregationConfig(), AggregationConfig(clip_norm=2.0)),
    (AggregationConfig(clip_norm=2.0), AggregationConfig(clip_norm=1.0),
     AggregationConfig(clip_norm=1.0)),
])
def test_a_run_gets_at_least_the_servers_protection(run, floor, stricter):
    assert run.at_least(floor) == stricter
