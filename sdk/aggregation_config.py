"""The ``[aggregation]`` section: which rule folds a round's updates, clipping and DP-FedAvg.

Declared once for both sides: a run config's section (pfl-sim, and a run on pfl-server) and
``pfl-server``'s own settings of the same names, the operator's floor (:meth:`at_least`). Kept
free of PyTorch: the server's HTTP workers read these settings without importing it; the rules
themselves are :mod:`pflkit.sdk.aggregation_rules`.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

import pydantic
from pydantic import Strict

from pflkit.sdk.config_types import STRICT_CONFIG, in_range, refuse_unused

# mean: the algorithm's own aggregator (weighted, streaming); the others are unweighted
Rule = Literal["mean", "median", "trimmed_mean"]
_TRIM = in_range(0.0, 0.5, open_high=True)  # share cut at each end (0.5 would cut everything)
_CLIP = in_range(0.0, 1e6, open_low=True)  # L2 bound on an update's change to the global state
# pfl-server's settings read the same ranges from environment text, so not Strict there
TrimFraction = Annotated[float, _TRIM]
ClipNorm = Annotated[float, _CLIP]
MIN_ACCOUNTED_NOISE = 1e-6  # z below: dp-accounting overflows (z = 1e-155 gave epsilon 0)
_NOISE = in_range(MIN_ACCOUNTED_NOISE, 1e3)  # z: noise std over the clip norm
_EPSILON = in_range(0.0, 1e3, open_low=True)
_DELTA = in_range(0.0, 0.1, open_low=True)  # well under 1/n is the usual choice
NoiseMultiplier = Annotated[float, _NOISE]
Epsilon = Annotated[float, _EPSILON]
Delta = Annotated[float, _DELTA]
_QUANTILE = in_range(0.0, 1.0, open_low=True, open_high=True)
_CLIP_RATE = in_range(0.0, 10.0, open_low=True)  # eta_C of the geometric update
_COUNT_STD = in_range(0.0, 1e6, open_low=True)  # sigma_b, in clients
_SECAGG_T = in_range(0.5, 1.0, open_low=True)  # t over K: over half, so t > K / 2
_SECAGG_K = in_range(2, 10_000)  # SecAgg+'s neighbours (even); None: every other device
_ROBUSTNESS = {"mean": 0, "trimmed_mean": 1, "median": 2}  # median: the highest breakdown point


@pydantic.dataclasses.dataclass(frozen=True, config=STRICT_CONFIG)
class AggregationConfig:
    """How a round's updates become the next global state (the ``[aggregation]`` section)."""

    rule: Rule = "mean"
    trim_fraction: Annotated[float, Strict(), _TRIM] = 0.1  # for trimmed_mean
    clip_norm: Annotated[float, Strict(), _CLIP] | None = None  # None: updates are not clipped
    # DP-FedAvg (sdk/dp_fedavg.py, docs/privacy.md), on when dp_clip_norm is set: each update's
    # change clipped to dp_clip_norm, Gaussian noise of std dp_noise_multiplier * dp_clip_norm on
    # the sum, divided by the clients per round; mean rule only
    dp_clip_norm: Annotated[float, Strict(), _CLIP] | None = None
    dp_noise_multiplier: Annotated[float, Strict(), _NOISE] | None = None
    dp_target_epsilon: Annotated[float, Strict(), _EPSILON] | None = None  # calibrates the noise
    dp_delta: Annotated[float, Strict(), _DELTA] = 1e-5
    dp_max_epsilon: Annotated[float, Strict(), _EPSILON] | None = None  # refuse rounds past it
    # adaptive clipping (Andrew et al. 2021, sdk/adaptive_clipping.py), on when the quantile
    # is set: dp_clip_norm is the first round's C, then C follows the target quantile
    dp_adaptive_quantile: Annotated[float, Strict(), _QUANTILE] | None = None
    dp_clip_learning_rate: Annotated[float, Strict(), _CLIP_RATE] = 0.2  # eta_C
    dp_clipped_count_stddev: Annotated[float, Strict(), _COUNT_STD] | None = None  # None: m/20
    dp_clip_on_device: Annotated[bool, Strict()] = False  # devices clip; the server checks
    # secure aggregation (sdk/secagg, docs/privacy.md): the server learns only the round's sum
    # of changes, each coordinate clipped to [-secagg_clip_range, secagg_clip_range] and
    # quantized; the mean is unweighted over the survivors; t = ceil(secagg_threshold * K) of
    # a device's K share holders (itself and its neighbours) must survive; mean rule only.
    # With DP each device clips to dp_clip_norm and adds its noise share (sdk/secagg/dp.py)
    secagg: Annotated[bool, Strict()] = False
    secagg_threshold: Annotated[float, Strict(), _SECAGG_T] = 0.6
    secagg_neighbours: Annotated[int, Strict(), _SECAGG_K] | None = None
    secagg_clip_range: Annotated[float, Strict(), _CLIP] = 1.0
    # the seed of what DP hides from the devices: each round's sample and DP noise (the run
    # seed is no secret: every task carries it). None: the run seed in pfl-sim; pfl-server
    # draws a secret one for a DP run when it creates it. Give it only to reproduce a run:
    # whoever knows it can subtract the noise (docs/privacy.md)
    dp_seed: Annotated[int, Strict(), in_range(0, 2**63 - 1)] | None = None

    def __post_init__(self) -> None:
        refuse_unused(self, self._unused())
        if self.secagg_neighbours is not None and self.secagg_neighbours % 2:
            raise ValueError(f"secagg_neighbours must be even, got {self.secagg_neighbours}")
        if self.secagg and (self.rule != "mean" or self.clip_norm is not None):
            raise ValueError("secagg: the server sees only the sum, so it takes rule = \"mean\""
                             " and no clip_norm")
        if self.secagg and (self.dp_target_epsilon, self.dp_adaptive_quantile) != (None, None):
            raise ValueError("secagg: devices add their share of DP's noise, so it takes "
                             "dp_noise_multiplier (not dp_target_epsilon nor adaptive clipping, "
                             "not yet)")
        noise = (self.dp_noise_multiplier, self.dp_target_epsilon)
        if self.dp_clip_norm is None:
            given = [f for f in ("dp_noise_multiplier", "dp_target_epsilon", "dp_max_epsilon",
                                 "dp_adaptive_quantile", "dp_clipped_count_stddev")
                     if getattr(self, f) is not None] + \
                ["dp_clip_on_device"] * self.dp_clip_on_device
            if given:
                raise ValueError(f"{given[0]} needs dp_clip_norm")
            return
        if (noise[0] is None) == (noise[1] is None):
            raise ValueError("dp_clip_norm: set exactly one of dp_noise_multiplier "
                             "and dp_target_epsilon")
        if self.rule != "mean" or self.clip_norm is not None:
            raise ValueError("dp_clip_norm: DP-FedAvg clips itself and averages: "
                             "it takes rule = \"mean\" and no clip_norm")
        if self.dp_adaptive_quantile is None:
            if self.dp_clipped_count_stddev is not None:
                raise ValueError("dp_clipped_count_stddev needs dp_adaptive_quantile")
        elif self.dp_clip_on_device:  # the server would see only clipped norms
            raise ValueError("dp_adaptive_quantile: adaptive clipping counts the norms before "
                             "clipping, so not with dp_clip_on_device (not yet)")

    def _unused(self) -> dict[str, str]:
        """The settings this rule, DP and SecAgg leave unused, each with why."""
        unused: dict[str, str] = {}
        if self.rule != "trimmed_mean":
            unused["trim_fraction"] = f'rule = "{self.rule}" (only "trimmed_mean" trims)'
        if self.dp_clip_norm is None:
            unused["dp_delta"] = "DP-FedAvg is off (dp_clip_norm unset)"
        if self.dp_adaptive_quantile is None:
            unused["dp_clip_learning_rate"] = "adaptive clipping is off " \
                "(dp_adaptive_quantile unset)"
        if not self.secagg:
            unused |= dict.fromkeys(("secagg_threshold", "secagg_neighbours",
                                     "secagg_clip_range"), "secagg = false")
        return unused

    @property
    def private(self) -> bool:
        """Whether rounds are DP-FedAvg (their sample and noise must be hidden from devices)."""
        return self.dp_clip_norm is not None

    def hidden_seed(self, run_seed: int) -> int:
        """The seed of each round's sample and DP noise: ``dp_seed``, else the run seed."""
        return run_seed if self.dp_seed is None else self.dp_seed

    def at_least(self, floor: AggregationConfig) -> AggregationConfig:
        """The stricter of this config and ``floor`` (:meth:`_stricter`), with this run's seed."""
        return dataclasses.replace(self._stricter(floor), dp_seed=self.dp_seed)

    def _stricter(self, floor: AggregationConfig) -> AggregationConfig:
        """The stricter of this config and ``floor`` (the server operator's), setting by setting.

        The more robust rule wins (mean < trimmed_mean < median), with the larger trim share
        when both trim; the smaller clip norm wins (None is no bound). So a run may ask for more
        protection than the server's default, never for less. DP-FedAvg (docs/privacy.md): a
        floor with ``dp_clip_norm`` makes every run private, with the smaller clip norm, delta
        and budget and the larger noise multiplier (or the smaller target epsilon: the floor's
        noise setting and the run's must be of one kind, an epsilon target and a multiplier do
        not compare before the run); a private run on a clipping floor clips at the smaller of
        the two norms.
        """
        if self.dp_clip_norm is None and floor.dp_clip_norm is None:
            rule = max(self.rule, floor.rule, key=_ROBUSTNESS.__getitem__)
            trims = [c.trim_fraction for c in (self, floor) if c.rule == rule]
            norms = [c.clip_norm for c in (self, floor) if c.clip_norm is not None]
            return dataclasses.replace(self, rule=rule, trim_fraction=max(trims),
                                       clip_norm=min(norms) if norms else None)
        if self.secagg and floor.dp_clip_norm is not None:  # not merged with the floor's yet
            raise ValueError("secagg: this server's floor sets DP; give the run's own "
                             "dp_noise_multiplier under SecAgg instead (not merged yet)")
        for side, config in (("this server's floor", floor), ("the run", self)):
            if config.rule != "mean":
                raise ValueError(f"rule: {side} asks for {config.rule!r}, but DP-FedAvg "
                                 f"(dp_clip_norm) takes \"mean\"")
        if floor.dp_clip_norm is None:  # a private run on a clipping (or no) floor
            return dataclasses.replace(self, dp_clip_norm=_least(self.dp_clip_norm,
                                                                 floor.clip_norm))
        if self.dp_clip_norm is None:
            return floor
        if (self.dp_noise_multiplier is None) != (floor.dp_noise_multiplier is None):
            kind = "dp_noise_multiplier" if floor.dp_noise_multiplier is not None \
                else "dp_target_epsilon"
            raise ValueError(f"this server's floor sets {kind}: give {kind} too (the stricter "
                             f"of the two applies) or leave the noise to the server")
        z, z_floor = self.dp_noise_multiplier, floor.dp_noise_multiplier
        return dataclasses.replace(
            self, dp_clip_norm=_least(self.dp_clip_norm, floor.dp_clip_norm),
            dp_noise_multiplier=None if z is None or z_floor is None else max(z, z_floor),
            dp_target_epsilon=_least(self.dp_target_epsilon, floor.dp_target_epsilon),
            dp_delta=min(self.dp_delta, floor.dp_delta),
            dp_max_epsilon=_least(self.dp_max_epsilon, floor.dp_max_epsilon))


def _least(*values: float | None) -> float | None:
    """The smallest of the values given (None: not given; all None: None)."""
    given = [v for v in values if v is not None]
    return min(given) if given else None
