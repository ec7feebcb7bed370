"""A secure-aggregation round: the sum is right within the quantization bound, with dropouts,
each masked vector the server receives looks uniform, and below the threshold nothing opens."""

from __future__ import annotations

import numpy as np
import pytest
from secagg_harness import Round, setup, updates

from pflkit.sdk.secagg import quantize
from pflkit.sdk.secagg.messages import RoundFailed, SecAggError, UnmaskRequest

CASES = {  # name: (setup, {client: step it skips})
    "full, no dropout": (setup(), {}),
    "full, one drops after masking keys": (setup(), {12: "masked"}),
    "full, max dropouts (n - t), at every step": (setup(), {10: "keys", 11: "shares"}),
    "full, n - t drop after sharing": (setup(), {13: "masked", 15: "masked"}),
    "full, survivors that stop before unmasking": (setup(), {11: "masked", 14: "unmask"}),
    "sparse k=4, no dropout": (setup(n=12, t=3, k=4), {}),
    "sparse k=4, two drop": (setup(n=12, t=3, k=4), {10: "masked", 17: "masked"}),
}


@pytest.mark.parametrize("name", CASES)
def test_the_sum_equals_the_plaintext_sum_within_the_quantization_bound(name):
    s, drops = CASES[name]
    values = updates(s)
    result = Round(s, drops).run(values)
    survivors = [c for c in s.roster if drops.get(c) not in ("keys", "shares", "masked")]
    assert result.survivors == tuple(survivors)
    expected = np.sum([values[c].astype(np.float64) for c in survivors], axis=0)
    bound = quantize.sum_error_bound(s.clip_range, len(s.roster), len(survivors))
    err = np.abs(result.total - expected).max()
    assert err <= bound * (1 + 1e-9)
    assert err > 0  # quantization is really there: the bound is not vacuous


def byte_chi_square(blob: bytes) -> float:
    counts = np.bincount(np.frombuffer(blob, np.uint8), minlength=256)
    expected = counts.sum() / 256
    return float(((counts - expected) ** 2 / expected).sum())


def test_every_masked_vector_looks_uniform_and_uncorrelated_with_its_update():
    s = setup(n=5, t=3, d=50_000)
    values = updates(s, scale=0.4)
    values[10][:] = 0.5  # a constant update is the easiest to spot through a weak mask
    rnd = Round(s, {12: "masked"})
    result = rnd.run(values)
    expected = np.sum([values[c].astype(np.float64) for c in result.survivors], axis=0)
    assert np.abs(result.total - expected).max() <= quantize.sum_error_bound(1.0, 5, 4)
    assert byte_chi_square(quantize.quantize(values[10], 1.0, 5).tobytes()) > 1e5  # unmasked
    assert len(rnd.masked) == 4
    for msg in rnd.masked:
        assert byte_chi_square(msg.vector) < 340  # 255 degrees of freedom: p ~ 3e-4 at 340
        words = np.frombuffer(msg.vector, "<u4").astype(np.float64)
        assert abs(words.mean() / 2**32 - 0.5) < 0.01
        if msg.sender != 10:
            assert abs(np.corrcoef(words, values[msg.sender])[0, 1]) < 0.03


@pytest.mark.parametrize("drops", [{10: "masked", 11: "masked", 12: "masked"},
                                   {10: "keys", 11: "shares", 12: "masked", 13: "masked"}])
def test_fewer_than_t_survivors_fails_the_round_and_nothing_is_unmasked(drops):
    rnd = Round(setup(), drops)
    with pytest.raises(RoundFailed, match=r"threshold 4.*nothing unmasked"):
        rnd.to_unmask(updates(rnd.setup))
    assert rnd.server.stage == "failed"
    with pytest.raises(SecAggError):
        rnd.server.finish()


def test_too_few_unmask_responses_fail_before_any_mask_is_removed():
    rnd = Round(setup(), {10: "masked", 11: "unmask", 12: "unmask"})
    values = updates(rnd.setup)
    request = rnd.to_unmask(values)
    for c in rnd.alive("unmask"):
        rnd.server.receive_unmask(rnd.clients[c].unmask(request))
    total_before = rnd.server._total.copy()
    with pytest.raises(RoundFailed, match="shares of client"):
        rnd.server.finish()
    np.testing.assert_array_equal(rnd.server._total, total_before)


def test_a_sparse_neighbourhood_below_threshold_fails_the_round():
    s = setup(n=12, t=3, k=4)
    from pflkit.sdk.secagg.graph import neighbourhoods

    victim = s.roster[0]
    drops = {v: "masked" for v in neighbourhoods(s)[victim][:3]}  # 2 of its 5 holders left
    with pytest.raises(RoundFailed, match=f"client {victim}'s holders survive"):
        Round(s, drops).to_unmask(updates(s))


def test_a_device_refuses_a_request_that_would_unmask_an_individual():
    rnd = Round(setup(), {12: "masked"})
    rnd.to_unmask(updates(rnd.setup))
    client = rnd.clients[10]
    greedy = UnmaskRequest(1, tuple(c for c in rnd.setup.roster if c != 12), (11, 12))
    with pytest.raises(SecAggError, match=r"names \[11\] as both"):
        client.unmask(greedy)
    client.unmask(rnd.server._request)  # the honest request still works afterwards


def test_a_late_masked_input_from_a_dropped_device_is_refused():
    rnd = Round(setup(), {12: "masked"})
    values = updates(rnd.setup)
    delivered = rnd.to_masked()
    for c in rnd.alive("masked"):
        rnd.server.receive_masked(rnd.clients[c].masked_input(delivered[c], values[c]))
    request = rnd.server.close_masked()
    assert request.dropped == (12,)
    late = rnd.clients[12].masked_input(delivered[12], values[12])
    with pytest.raises(SecAggError, match="arrived in stage unmask"):
        rnd.server.receive_masked(late)
