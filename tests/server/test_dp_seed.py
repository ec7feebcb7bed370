"""A DP run's sample and noise come from a seed only the server knows (``dp_seed``).

The run seed is in every task a device gets (its own seeded training needs it): noise drawn from
it could be subtracted from a released global state by any device (docs/privacy.md).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from server_harness import run_toml

from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.server.runs import RunRules, prepare_run

DP = "[aggregation]\ndp_clip_norm = 0.5\ndp_noise_multiplier = 1.0\n"
FLOOR = AggregationConfig(dp_clip_norm=0.5, dp_noise_multiplier=1.0)
NO_FLOOR = AggregationConfig()


def stored(config: str, tmp_path: Path, floor: AggregationConfig = NO_FLOOR) -> dict:
    """The [aggregation] pfl-server stores for a run created from ``config``."""
    *_, terms, kept = prepare_run(config, tmp_path / "blobs", RunRules(aggregation=floor))
    assert "dp_seed" not in terms.to_json()  # what devices are told about the run
    return tomllib.loads(kept).get("aggregation", {})


@pytest.mark.parametrize(("config", "floor"), [(run_toml() + DP, NO_FLOOR),
                                               (run_toml(), FLOOR)],
                         ids=["the run's DP", "the server's DP floor"])
def test_a_dp_run_gets_a_secret_seed_of_its_own(tmp_path, config, floor):
    seeds = {stored(config, tmp_path / str(i), floor)["dp_seed"] for i in range(3)}
    assert len(seeds) == 3 and all(0 <= s < 2**63 for s in seeds)


def test_a_given_dp_seed_is_kept_and_a_run_without_dp_gets_none(tmp_path):
    assert stored(run_toml() + DP + "dp_seed = 7\n", tmp_path / "a")["dp_seed"] == 7
    assert "dp_seed" not in stored(run_toml(), tmp_path / "b")


def test_the_floor_keeps_the_runs_dp_seed():
    assert AggregationConfig(dp_seed=7).at_least(FLOOR).dp_seed == 7
    assert AggregationConfig(dp_seed=7).hidden_seed(0) == 7
    assert AggregationConfig().hidden_seed(3) == 3  # pfl-sim: the run seed


@pytest.mark.parametrize("value", ["-1", "9223372036854775808", "1.5", "true"])
def test_dp_seed_range(value):
    with pytest.raises(ConfigError, match="aggregation.dp_seed"):
        SimConfig.from_toml(run_toml() + DP + f"dp_seed = {value}\n")
