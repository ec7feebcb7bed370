"""The server's floor on DP-FedAvg (AggregationConfig.at_least): the stricter setting wins."""

import pytest

from pflkit.sdk.aggregation_config import AggregationConfig


def dp(clip=0.5, z=None, target=None, delta=1e-5, budget=None):
    return AggregationConfig(dp_clip_norm=clip, dp_noise_multiplier=z, dp_target_epsilon=target,
                             dp_delta=delta, dp_max_epsilon=budget)


@pytest.mark.parametrize("run, floor, stricter", [
    (dp(z=1.0), AggregationConfig(), dp(z=1.0)),  # no DP floor: the run's own
    (AggregationConfig(), dp(z=2.0), dp(z=2.0)),  # a DP floor makes every run private
    (AggregationConfig(clip_norm=3.0), dp(z=2.0), dp(z=2.0)),
    (dp(z=1.0), dp(z=2.0), dp(z=2.0)),  # the larger noise multiplier
    (dp(z=3.0), dp(z=2.0), dp(z=3.0)),
    (dp(clip=0.5, z=1.0), dp(clip=0.3, z=1.0), dp(clip=0.3, z=1.0)),  # the smaller clip norm
    (dp(clip=0.2, z=1.0), dp(clip=0.3, z=1.0), dp(clip=0.2, z=1.0)),
    (dp(target=8.0), dp(target=3.0), dp(target=3.0)),  # the smaller target epsilon
    (dp(target=1.0), dp(target=3.0), dp(target=1.0)),
    (dp(z=1.0, budget=8.0), dp(z=1.0, budget=4.0), dp(z=1.0, budget=4.0)),  # the smaller budget
    (dp(z=1.0, budget=2.0), dp(z=1.0, budget=4.0), dp(z=1.0, budget=2.0)),
    (dp(z=1.0), dp(z=1.0, budget=4.0), dp(z=1.0, budget=4.0)),
    (dp(z=1.0, delta=1e-4), dp(z=1.0), dp(z=1.0)),  # the smaller delta
    (dp(z=1.0, delta=1e-7), dp(z=1.0), dp(z=1.0, delta=1e-7)),
    (dp(clip=0.5, z=1.0), AggregationConfig(clip_norm=0.2), dp(clip=0.2, z=1.0)),
    (dp(clip=0.1, z=1.0), AggregationConfig(clip_norm=0.2), dp(clip=0.1, z=1.0)),
])
def test_a_run_gets_at_least_the_servers_privacy(run, floor, stricter):
    assert run.at_least(floor) == stricter


@pytest.mark.parametrize("run, floor, message", [
    (dp(target=3.0), dp(z=1.0), "this server's floor sets dp_noise_multiplier: give "
                                "dp_noise_multiplier too"),
    (dp(z=1.0), dp(target=3.0), "this server's floor sets dp_target_epsilon"),
    (AggregationConfig("median"), dp(z=1.0), "rule: the run asks for 'median', but DP-FedAvg"),
    (dp(z=1.0), AggregationConfig("trimmed_mean"), "rule: this server's floor asks for "
                                                   "'trimmed_mean'"),
])
def test_what_does_not_compare_is_refused_in_one_line(run, floor, message):
    with pytest.raises(ValueError, match=message):
        run.at_least(floor)
