"""Adaptive clipping's count noise too small for z is refused with the config, not mid-run.

Before, an unset ``dp_clipped_count_stddev`` (m / 20) or a calibrated z was first checked when
round 0 opened: pfl-sim had written the run folder, then removed it ("the run failed").
"""

from __future__ import annotations

import pytest

from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.aggregation_rules import refuse_unfit_rules
from pflkit.sdk.builder import build_algorithm, load_data
from pflkit.sdk.round_schedule import Sampling
from pflkit.sdk.run_config import (
    AlgorithmConfig,
    DataConfig,
    ModelConfig,
    SimConfig,
    TrainingConfig,
)
from pflkit.server.simulator import Simulation

ADAPTIVE = dict(dp_clip_norm=1.0, dp_adaptive_quantile=0.5)


def config(**dp) -> SimConfig:
    return SimConfig(seed=0, rounds=2, eval_interval=2, checkpoint_interval=2,
                     data=DataConfig(dataset="synthetic", kind="iid", num_clients=4),
                     model=ModelConfig("twonn"), algorithm=AlgorithmConfig("fedavg"),
                     training=TrainingConfig(clients_per_round=4, epochs=1, batch_size=50),
                     aggregation=AggregationConfig(**ADAPTIVE, **dp))


@pytest.mark.parametrize(("dp", "z"), [
    ({"dp_noise_multiplier": 1.0}, "noise multiplier 1:"),  # m / 20 = 0.2 for m = 4
    ({"dp_target_epsilon": 1.0}, "noise multiplier 11.4"),  # the calibrated z
])
def test_pfl_sim_refuses_a_too_small_default_count_noise_before_writing(tmp_path, dp, z):
    run_dir = tmp_path / "run"
    with pytest.raises(ValueError, match=r"^aggregation.dp_clipped_count_stddev: "
                       rf"dp_clipped_count_stddev 0.2 is too small for {z}.* \(unset: m / 20, "
                       r"for m = 4 clients a round\)$"):
        Simulation(config(**dp), run_dir, progress=False)
    assert not run_dir.exists()


def test_a_fixed_round_size_is_checked_without_a_roster():
    """pfl-server's creation: a round opens with clients_per_round clients, so m is known."""
    sim = config(dp_noise_multiplier=1.0)
    algorithm = build_algorithm(sim, load_data(sim).spec)
    state = algorithm.aggregation.init_global(0)
    schedule = sim.schedule()
    with pytest.raises(ValueError, match=r"for m = 4 clients a round\)$"):
        refuse_unfit_rules(sim.aggregation, algorithm.aggregation, state, schedule)
    big = schedule.__class__(**{**schedule.__dict__, "sampling": Sampling(clients_per_round=40)})
    refuse_unfit_rules(sim.aggregation, algorithm.aggregation, state, big)  # 40 / 20 > 1 / 2


def test_pfl_server_refuses_it_when_the_run_is_created(tmp_path):
    """POST /v1/runs (service.runs.create): 422 naming the setting, no run stored."""
    from pflkit.server.errors import Invalid
    from pflkit.server.service import build_service
    from pflkit.server.settings import ServerSettings

    service = build_service(ServerSettings(admin_token="x" * 20, data_dir=tmp_path / "data"))
    with pytest.raises(Invalid, match=r"dp_clipped_count_stddev .* for m = 4 clients a round"):
        service.runs.create(config(dp_noise_multiplier=1.0).to_toml())
    with service.store.transaction() as session:
        assert service.store.current_run(session) is None
