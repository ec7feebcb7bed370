"""pfl-server accounts each DP round at the population it was drawn from.

Clients enroll during a run, so a round's sample comes from more (or fewer) clients than the
last one's. Accounting every round at the newest population understated epsilon: rounds of 2
of 3 clients, then one of 2 of 40, were reported as if all had been 2 of 40.
"""

from __future__ import annotations

import pytest
from service_harness import current, global_of, service_for
from sqlalchemy import select

from pflkit.sdk.privacy_accounting import calibrate_noise, epsilon_of_rounds
from pflkit.sdk.tensorio import read_metadata, state_to_bytes

Z, DELTA = 1.0, 1e-5
DP = f"[aggregation]\ndp_clip_norm = 0.5\ndp_noise_multiplier = {Z}\ndp_delta = {DELTA}\n"


def close_a_round(service) -> dict:
    """Every sampled client sends global + 1; the closed round's metrics."""
    status, rnd = current(service)
    start = global_of(service, status["global_hash"])
    for cid in rnd["sampled"]:
        service.uploads.accept(cid, status["id"], rnd["index"], 10,
                               state_to_bytes({k: v + 1 for k, v in start.items()}))
    service.rounds.tick()
    status = current(service)[0]
    return status["history"][-1]["metrics"], status["global_hash"]


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_each_round_is_accounted_at_its_own_population(tmp_path, database, request):
    url = request.getfixturevalue("postgres_url") if database == "postgresql" else None
    service, _ = service_for(tmp_path, url, per_round=2, run_extra=DP)
    for _ in range(2):  # two rounds of 2 of the 3 enrolled clients
        close_a_round(service)
    enrollment = service.enrollment
    for cid in range(3, 40):  # 37 more clients enroll before the third round opens
        enrollment.enroll(enrollment.issue_token(cid, None)[1])
    metrics, _ = close_a_round(service)  # the third round opened on 3 clients
    assert metrics["dp_epsilon"] == pytest.approx(
        epsilon_of_rounds(((Z, 2, 3, 3),), DELTA), rel=1e-9)
    metrics, digest = close_a_round(service)  # the fourth round is drawn from all 40
    truth = epsilon_of_rounds(((Z, 2, 3, 3), (Z, 2, 40, 1)), DELTA)
    at_newest = epsilon_of_rounds(((Z, 2, 40, 4),), DELTA)
    assert truth > 1.9 * at_newest  # what the old accounting reported instead
    assert metrics["dp_epsilon"] == pytest.approx(truth, rel=1e-9)
    stored = read_metadata(service.store.blobs.get(digest))  # the model card's epsilon
    assert float(stored["dp_epsilon"]) == pytest.approx(truth, rel=1e-9)


def test_a_target_epsilon_holds_when_the_roster_grows(tmp_path):
    """dp_target_epsilon = 4 over 5 rounds: two rounds of 2 of 3, then three of 2 of 40. Each
    round calibrated for its own roster alone spent 4.51; the server now calibrates each for
    the rounds already run, and the run ends within the target."""
    target = "[aggregation]\ndp_clip_norm = 0.5\ndp_target_epsilon = 4.0\n"
    service, _ = service_for(tmp_path, None, per_round=2, run_extra=target)
    first = [close_a_round(service)[0]]
    for cid in range(3, 40):
        service.enrollment.enroll(service.enrollment.issue_token(cid, None)[1])
    rounds = first + [close_a_round(service)[0] for _ in range(4)]  # the 2nd opened on 3
    z_small = calibrate_noise(4.0, DELTA, 5, 2, 3)
    z_grown = calibrate_noise(4.0, DELTA, 3, 2, 40, ((z_small, 2, 3, 2),))
    assert [m["dp_noise_multiplier"] for m in rounds] == [z_small] * 2 + [z_grown] * 3
    spent = rounds[-1]["dp_epsilon"]
    assert spent == pytest.approx(epsilon_of_rounds(((z_small, 2, 3, 2), (z_grown, 2, 40, 3)),
                                                    DELTA), rel=1e-9)
    assert 3.99 < spent <= 4.0


def test_the_noise_a_round_was_given_is_what_is_accounted(tmp_path):
    """Each earlier round is accounted at the noise multiplier its close recorded, not at one
    computed again: a server upgraded mid-run (earlier versions calibrated each roster alone)
    or given another floor noised its rounds otherwise, and after a restart the server
    recalibrated every roster change of the run (3 s each). While the roster stays, the next
    round keeps that noise; a new roster is calibrated after what was spent."""
    from pflkit.server.orm import Round

    target = "[aggregation]\ndp_clip_norm = 0.5\ndp_target_epsilon = 4.0\n"
    service, _ = service_for(tmp_path, None, per_round=2, run_extra=target)
    close_a_round(service)
    with service.store.transaction() as db:  # as if that round had been noised with less
        first = db.scalars(select(Round).where(Round.index == 0)).one()
        z_given = 0.8 * first.metrics["dp_noise_multiplier"]
        first.metrics = {**first.metrics, "dp_noise_multiplier": z_given}
    metrics, _ = close_a_round(service)  # the second round, opened on the same 3 clients
    assert metrics["dp_noise_multiplier"] == z_given
    assert metrics["dp_epsilon"] == pytest.approx(
        epsilon_of_rounds(((z_given, 2, 3, 2),), DELTA), rel=1e-9)
    for cid in range(3, 40):
        service.enrollment.enroll(service.enrollment.issue_token(cid, None)[1])
    close_a_round(service)  # the third round opened on 3 clients too
    metrics, _ = close_a_round(service)
    z_grown = calibrate_noise(4.0, DELTA, 2, 2, 40, ((z_given, 2, 3, 3),))
    assert metrics["dp_noise_multiplier"] == z_grown
    assert metrics["dp_epsilon"] == pytest.approx(
        epsilon_of_rounds(((z_given, 2, 3, 3), (z_grown, 2, 40, 1)), DELTA), rel=1e-9)
