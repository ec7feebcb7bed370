"""pfl-server keeps a DP run within ``dp_max_epsilon``: the round past it never opens.

pfl-sim refuses such a round before training it (docs/privacy.md). pfl-server opened it: its
devices trained and uploaded, and every close was refused (PrivacyBudgetExceeded at each tick,
the run active for good). Each service test runs on a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import pytest
from service_harness import current, service_for
from test_dp_growing_roster import close_a_round

from pflkit.sdk.privacy_accounting import epsilon
from pflkit.server.errors import Invalid

BUDGET = "[aggregation]\ndp_clip_norm = 1.0\ndp_noise_multiplier = 1.0\ndp_max_epsilon = 20.0\n"
# sigma_b defaults to m / 20 = 0.15 for 3 clients a round: at or under z / 2 = 0.5, refused
ADAPTIVE_DEFAULT = "[aggregation]\ndp_clip_norm = 1.0\ndp_noise_multiplier = 1.0\n" \
    "dp_adaptive_quantile = 0.5\n"


def test_the_round_that_would_spend_past_the_budget_is_not_opened(tmp_path, database_url):
    # 3 of 3 clients at z = 1: 16.5 after two rounds, 21.4 after three (budget 20)
    assert epsilon(1.0, 3, 3, 2, 1e-5) < 20.0 < epsilon(1.0, 3, 3, 3, 1e-5)
    service, _ = service_for(tmp_path, database_url, per_round=3, run_extra=BUDGET)
    for _ in range(2):
        close_a_round(service)
    status, rnd = current(service)
    assert (status["status"], status["rounds_done"], rnd) == ("finished", 2, None)
    assert status["privacy"]["epsilon"] == pytest.approx(epsilon(1.0, 3, 3, 2, 1e-5))
    assert service.tasks.task(0)["status"] == "finished"  # no device trains a third round
    service.rounds.tick()  # and the keeper has nothing left to do
    assert current(service)[0]["rounds_done"] == 2


def test_a_default_count_noise_too_small_for_a_fixed_round_size_is_refused_when_created(
        tmp_path):
    """clients_per_round = 3 fixes m: the default m / 20 is known too small before any round."""
    with pytest.raises(Invalid, match=r"dp_clipped_count_stddev 0\.15 is too small .* for m = "
                                      r"3 clients a round\)$"):
        service_for(tmp_path, None, per_round=3, run_extra=ADAPTIVE_DEFAULT, min_enrolled=4)


@pytest.mark.parametrize("noise, floor", [
    ("dp_noise_multiplier = 1.0\ndp_clipped_count_stddev = 0.4\n", {}),  # 0.4 <= 1 / 2
    ("dp_noise_multiplier = 1.0\ndp_clipped_count_stddev = 0.8\n",  # the floor's z = 2
     {"dp_clip_norm": 1.0, "dp_noise_multiplier": 2.0}),
], ids=["run", "floor"])
def test_a_given_count_noise_too_small_for_z_is_refused_when_created(tmp_path, noise, floor):
    service, _ = service_for(tmp_path, None, per_round=3, **floor)
    service.runs.transition(current(service)[0]["id"], "stop")
    run = "[aggregation]\ndp_clip_norm = 1.0\ndp_adaptive_quantile = 0.5\n" + noise
    with pytest.raises(Invalid, match=r"^run config: dp_clipped_count_stddev 0\.\d is too small "
                       r"for noise multiplier [12]: adaptive clipping needs it above z / 2"):
        service.runs.create((tmp_path / "run.toml").read_text() + run)
