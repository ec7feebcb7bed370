"""A share-sized round's count noise is checked at the smallest roster a round opens with.

Before, a run sampling a share of the enrolled clients (``training.fraction``) with adaptive
clipping and DP was created, and its default count noise (m / 20) too small for z showed only
when round 0 opened: a ValueError at every tick, no round ever opening at that roster. No round
opens with fewer than ``min_enrolled`` clients (and, under SecAgg, a sample of fewer than
two), so m is known at its smallest when the run is created.
"""

from __future__ import annotations

import pytest
from server_harness import run_toml

from pflkit.server.errors import Invalid
from pflkit.server.service import build_service
from pflkit.server.settings import ServerSettings

ADAPTIVE = "[aggregation]\ndp_clip_norm = 1.0\ndp_noise_multiplier = 1.0\n" \
    "dp_adaptive_quantile = 0.5\n"


def share_run(fraction: float, extra: str = "") -> str:
    return run_toml(rounds=2).replace("clients_per_round = 2\n", f"fraction = {fraction}\n") \
        + ADAPTIVE + extra


def service(tmp_path, **settings):
    return build_service(ServerSettings(admin_token="x" * 20, data_dir=tmp_path / "data",
                                        **settings))


def no_run(server) -> bool:
    with server.store.transaction() as session:
        return server.store.current_run(session) is None


@pytest.mark.parametrize("min_enrolled,m", [(3, 3), (None, 1)])
def test_a_share_sized_round_too_small_for_z_is_refused_at_creation(tmp_path, min_enrolled, m):
    server = service(tmp_path, min_enrolled=min_enrolled)
    with pytest.raises(Invalid, match=rf"^run config: aggregation.dp_clipped_count_stddev: "
                       rf"dp_clipped_count_stddev {m / 20:g} is too small for noise multiplier "
                       rf"1: .* \(unset: m / 20, for m = {m} clients a round\)$"):
        server.runs.create(share_run(1.0))
    assert no_run(server)


def test_the_same_run_is_created_where_its_smallest_round_carries_z(tmp_path):
    """20 clients at least: m / 20 = 1 > z / 2 in every round that can open."""
    server = service(tmp_path, min_enrolled=20)
    assert server.runs.create(share_run(1.0)).status == "active"


def test_a_calibrated_z_is_checked_at_the_smallest_roster_too(tmp_path):
    """2 of 3 clients at epsilon 1 over 2 rounds needs z over 2 = 2 x the given count noise."""
    server = service(tmp_path, min_enrolled=3)
    run = run_toml(rounds=2) + "[aggregation]\ndp_clip_norm = 1.0\ndp_target_epsilon = 1.0\n" \
        "dp_adaptive_quantile = 0.5\ndp_clipped_count_stddev = 1.0\n"
    with pytest.raises(Invalid, match=r"^run config: aggregation.dp_clipped_count_stddev: "
                       r"dp_clipped_count_stddev 1 is too small for noise multiplier \d"):
        server.runs.create(run)
    assert no_run(server)
