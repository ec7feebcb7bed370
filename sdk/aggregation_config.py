"""The ``[aggregation]`` section: which rule folds a round's updates, and the clipping bound.

Declared once for both sides: a run config's section (pfl-sim, and a run on pfl-server) and
``pfl-server``'s own settings of the same names, the operator's floor (:meth:`at_least`). Kept
free of PyTorch: the server's HTTP workers read these settings without importing it; the rules
themselves are :mod:`pflkit.sdk.aggregation_rules`.
"""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic
from pydantic import Strict

from pflkit.sdk.config_types import STRICT_CONFIG, in_range

# mean: the algorithm's own aggregator (weighted, streaming); the others are unweighted
Rule = Literal["mean", "median", "trimmed_mean"]
_TRIM = in_range(0.0, 0.5, open_high=True)  # share cut at each end (0.5 would cut everything)
_CLIP = in_range(0.0, 1e6, open_low=True)  # L2 bound on an update's change to the global state
# pfl-server's settings read the same ranges from environment text, so not Strict there
TrimFraction = Annotated[float, _TRIM]
ClipNorm = Annotated[float, _CLIP]
_ROBUSTNESS = {"mean": 0, "trimmed_mean": 1, "median": 2}  # median: the highest breakdown point


@pydantic.dataclasses.dataclass(frozen=True, config=STRICT_CONFIG)
class AggregationConfig:
    """How a round's updates become the next global state (the ``[aggregation]`` section)."""

    rule: Rule = "mean"
    trim_fraction: Annotated[float, Strict(), _TRIM] = 0.1  # for trimmed_mean
    clip_norm: Annotated[float, Strict(), _CLIP] | None = None  # None: updates are not clipped

    def at_least(self, floor: AggregationConfig) -> AggregationConfig:
        """The stricter of this config and ``floor`` (the server operator's), setting by setting.

        The more robust rule wins (mean < trimmed_mean < median), with the larger trim share
        when both trim; the smaller clip norm wins (None is no bound). So a run may ask for more
        protection than the server's default, never for less.
        """
        rule = max(self.rule, floor.rule, key=_ROBUSTNESS.__getitem__)
        trims = [c.trim_fraction for c in (self, floor) if c.rule == rule]
        norms = [c.clip_norm for c in (self, floor) if c.clip_norm is not None]
        return AggregationConfig(rule, max(trims), min(norms) if norms else None)
