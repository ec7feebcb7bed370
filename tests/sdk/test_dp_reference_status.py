"""The run status's privacy block for adaptive clipping: the C rounds really clip to now.

With ``dp_adaptive_quantile`` the configured ``dp_clip_norm`` is only round 0's C; each closed
round's metrics record the C it used (``dp_clip_norm``), and the status shows the last one.
"""

from __future__ import annotations

from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.server.privacy_status import privacy_status


def test_the_status_shows_the_clip_norm_the_last_round_used():
    rules = AggregationConfig(dp_clip_norm=0.5, dp_noise_multiplier=1.0,
                              dp_adaptive_quantile=0.5)
    history = [{"metrics": {"dp_epsilon": 1.0, "dp_noise_multiplier": 1.0,
                            "dp_clip_norm": 0.5}},
               {"metrics": {"dp_epsilon": 1.5, "dp_noise_multiplier": 1.0,
                            "dp_clip_norm": 0.81}}]
    shown = privacy_status(rules, history)
    assert shown is not None and (shown["clip_norm"], shown["epsilon"]) == (0.81, 1.5)
    before = privacy_status(rules, [])
    assert before is not None and before["clip_norm"] == 0.5  # no round closed yet
