"""Aggregation rules shared by pfl-sim and pfl-server: norm clipping, robust rules, DP-FedAvg.

A run config's ``[aggregation]`` section
(:class:`~pflkit.sdk.aggregation_config.AggregationConfig`) chooses them; ``pfl-server``'s
settings of the same names are the operator's floor. The maths are pure functions (tested
against numpy). The aggregators plug into the Coordinator through :class:`AggregatorFactory`:

- :class:`ClippedAggregator` bounds each update's change to the round's global state,
  ``g + (u - g) * min(1, C / ||u - g||)`` with one L2 norm over all floating tensors, then
  passes it to the inner (streaming) aggregator: O(model) memory.
- :class:`RobustAggregator` computes the coordinate-wise median or trimmed mean
  (Yin et al. 2018). These need every update at once, so :meth:`add` spills each update to
  one append-only float32 file per tensor in a scratch folder, and :meth:`result` reads them
  back ``chunk`` coordinates at a time: memory is O(model + K * chunk) for K updates; disk is
  O(K * model). Robust rules are unweighted (sample counts would let one client outvote the
  rest, which is what they guard against).
- :class:`~pflkit.sdk.dp_fedavg.DpFedAvgAggregator` (``dp_clip_norm``): DP-FedAvg's clipped,
  noised mean, accounted by :mod:`pflkit.sdk.privacy_accounting`.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from pflkit.sdk.adaptive_clipping import sum_noise_multiplier
from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.algorithms.aggregators import Aggregator, State, WeightedMean
from pflkit.sdk.algorithms.server_aggregation import ServerAggregation
from pflkit.sdk.dp_fedavg import ClipNorm, DpFedAvgAggregator
from pflkit.sdk.privacy_accounting import dp_rounds
from pflkit.sdk.run_config import Schedule

CHUNK = 1 << 16  # coordinates read per tensor and pass in RobustAggregator.result


def clip_update(global_state: State, update: State, max_norm: float) -> State:
    """Scale the update's floating-point change to the global state to L2 norm <= max_norm."""
    floats = [k for k, v in update.items() if v.is_floating_point()]
    squared = sum(float(((update[k].double() - global_state[k].double()) ** 2).sum())
                  for k in floats)
    norm = math.sqrt(squared)
    if norm <= max_norm:
        return update
    scale = max_norm / norm
    out = dict(update)
    for k in floats:
        delta = update[k].double() - global_state[k].double()
        out[k] = (global_state[k].double() + delta * scale).to(update[k].dtype)
    return out


def refuse_unfit_rules(rules: AggregationConfig, aggregation: ServerAggregation,
                       global_state: State, schedule: Schedule | None = None,
                       population: int | None = None) -> None:
    """Refuse (one line) aggregation rules the method's server step cannot take.

    pfl-sim (exit 2) and pfl-server (422 at run creation, the operator's floor applied) call
    this before any round, so such a run never trains a round it cannot close:

    - Clipping (DP-FedAvg's ``dp_clip_norm``, or ``clip_norm``) bounds an update's change to the
      round's global state, so each floating tensor of the update schema needs its global
      counterpart: SCAFFOLD uploads control deltas while the global state holds the control
      variate itself.
    - A robust rule, DP-FedAvg's noised mean and SecAgg's masked sum each replace the method's
      aggregator, which is only sound for the plain weighted mean: pFedMe's beta blend and
      SCAFFOLD's server step and control variate would be dropped or crash at the close.
    - Adaptive clipping's count noise ``dp_clipped_count_stddev`` must exceed ``z / 2``
      (:func:`~pflkit.sdk.adaptive_clipping.sum_noise_multiplier`), where both are given: no
      round of such a run could close. The default, ``m / 20``, and a calibrated z are
      checked too where the round size is known (:func:`_refuse_small_count_noise`).
    """
    count_stddev, z = rules.dp_clipped_count_stddev, rules.dp_noise_multiplier
    if count_stddev is not None and z is not None:
        sum_noise_multiplier(z, count_stddev)
    if schedule is not None:
        _refuse_small_count_noise(rules, schedule, population)
    schema = aggregation.update_schema(global_state)
    missing = [k for k, (_, dtype) in schema.items()
               if dtype.is_floating_point and k not in global_state]
    if missing and (rules.dp_clip_norm is not None or rules.clip_norm is not None):
        setting = "dp_clip_norm" if rules.dp_clip_norm is not None else "clip_norm"
        raise ValueError(f"aggregation.{setting}: the method uploads {len(missing)} tensor(s) "
                         f"with no global counterpart to clip a change against (e.g. "
                         f"'{missing[0]}'), so it cannot take clipping or DP")
    replacing = ("dp_clip_norm" if rules.private else "secagg" if rules.secagg
                 else "rule" if rules.rule != "mean" else None)
    own = aggregation.new_aggregator(global_state, 1)
    if replacing is not None and type(own) is not WeightedMean:
        raise ValueError(f"aggregation.{replacing}: it would replace the method's own server "
                         f"step ({type(own).__name__}); this method needs rule = \"mean\" "
                         f"without DP or SecAgg")


def _refuse_small_count_noise(rules: AggregationConfig, schedule: Schedule,
                              population: int | None) -> None:
    """Refuse adaptive clipping whose count noise is too small for z in the run's rounds.

    pfl-sim knows its ``population``, so its rounds' size m. A server's roster is not known
    at creation, but a round with a fixed ``clients_per_round`` opens with that many clients
    (m), and z is the given one (``dp_target_epsilon`` calibrates it per roster: per round).
    """
    if rules.dp_adaptive_quantile is None or rules.dp_clip_norm is None:
        return
    if population is None:
        population = schedule.sampling.clients_per_round
        if population is None or rules.dp_noise_multiplier is None:
            return
    m = schedule.sample_size(population)
    try:
        dp_rounds(rules, population, m, schedule.rounds)
    except ValueError as err:
        unset = "" if rules.dp_clipped_count_stddev is not None else \
            f" (unset: m / 20, for m = {m} clients a round)"
        raise ValueError(f"aggregation.dp_clipped_count_stddev: {err}{unset}") from None


def trimmed_mean(values: np.ndarray, trim_fraction: float) -> np.ndarray:
    """Mean over axis 0 after dropping the floor(trim * K) smallest and largest per coordinate."""
    k = values.shape[0]
    cut = math.floor(trim_fraction * k)
    if 2 * cut >= k:
        raise ValueError(f"trim fraction {trim_fraction} leaves nothing of {k} updates")
    ordered = np.sort(values, axis=0)
    return ordered[cut : k - cut].mean(axis=0)


def coordinate_median(values: np.ndarray) -> np.ndarray:
    """Median over axis 0 (the mean of the two middle values for an even count)."""
    return np.median(values, axis=0)


class ClippedAggregator(Aggregator):
    """Clip each update's change, then delegate to a streaming aggregator."""

    def __init__(self, inner: Aggregator, global_state: State, max_norm: float) -> None:
        self._inner = inner
        self._global = global_state
        self._max_norm = max_norm

    def add(self, weight: float, update: State) -> None:
        """Clip, then fold into the inner aggregator."""
        self._inner.add(weight, clip_update(self._global, update, self._max_norm))

    def result(self) -> State:
        """Return the inner aggregator's result."""
        return self._inner.result()


class RobustAggregator(Aggregator):
    """Coordinate-wise median or trimmed mean, spilled to disk and reduced chunk by chunk."""

    def __init__(self, global_state: State, rule: str, scratch: Path, trim_fraction: float = 0.1,
                 chunk: int = CHUNK) -> None:
        if rule not in ("median", "trimmed_mean"):
            raise ValueError(f"unknown robust rule '{rule}'")
        self._global = global_state
        self._rule = rule
        self._trim = trim_fraction
        self._chunk = chunk
        Path(scratch).mkdir(parents=True, exist_ok=True)
        self._dir = Path(tempfile.mkdtemp(prefix="robust-", dir=scratch))
        self._files: dict[str, Path] = {}
        self._counts: dict[str, int] = {}

    def add(self, weight: float, update: State) -> None:
        """Append each floating tensor as one float32 row of its spill file (weight unused)."""
        for key, value in update.items():
            if not value.is_floating_point():
                continue
            path = self._files.setdefault(key, self._dir / f"{len(self._files)}.f32")
            with path.open("ab") as handle:
                handle.write(value.detach().to(torch.float32).contiguous().numpy().tobytes())
            self._counts[key] = self._counts.get(key, 0) + 1

    def _reduce(self, values: np.ndarray) -> np.ndarray:
        if self._rule == "median":
            return coordinate_median(values)
        return trimmed_mean(values, self._trim)

    def result(self) -> State:
        """Reduce each tensor ``chunk`` coordinates at a time; keys nobody sent keep the global."""
        out = dict(self._global)
        try:
            for key, path in self._files.items():
                ref = self._global[key]
                numel = ref.numel()
                rows = np.memmap(path, dtype=np.float32, mode="r",
                                 shape=(self._counts[key], numel))
                reduced = np.empty(numel, dtype=np.float64)
                for start in range(0, numel, self._chunk):
                    stop = min(start + self._chunk, numel)
                    # (K, chunk) slice of every update
                    reduced[start:stop] = self._reduce(np.asarray(rows[:, start:stop],
                                                                  dtype=np.float64))
                del rows
                out[key] = torch.from_numpy(reduced).reshape(ref.shape).to(ref.dtype)
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)
        return out


class AggregatorFactory:
    """The factory pfl-sim and pfl-server hand the Coordinator for ``rules``.

    ``default`` is the algorithm's own aggregator (the ``mean`` rule); robust rules spill to
    ``scratch``. With DP (``dp_clip_norm``) a round past ``dp_max_epsilon`` is refused here,
    when the Coordinator opens it (:class:`~pflkit.sdk.privacy_accounting.PrivacyBudgetExceeded`).
    ``clip`` is DP's clip norm, the state of the run that adaptive clipping moves after each
    round: a resumed run and the server's close of a round pass the stored one in
    (``clip_norm``; None: the config's first), and store ``clip.value`` with the global state.
    ``earlier``: ``(sample_size, population)`` of the run's rounds before this one, where a
    server's roster changed them (empty: every round at this one's), and ``noised`` the z each
    was noised with where recorded, for DP's accounting (:func:`dp_rounds`).
    """

    def __init__(self, default: Callable[[State, int], Aggregator], rules: AggregationConfig,
                 scratch: Path, schedule: Schedule, seed: int,
                 clip_norm: float | None = None,
                 earlier: Sequence[tuple[int, int]] = (),
                 noised: Sequence[float | None] = ()) -> None:
        self.default = default
        self.rules = rules
        self.scratch = scratch
        self.schedule = schedule
        self.seed = seed
        self.earlier = tuple(earlier)
        self.noised = tuple(noised)
        first = rules.dp_clip_norm if clip_norm is None else clip_norm
        self.clip = None if first is None else ClipNorm(first)

    def __call__(self, global_state: State, population: int, round_index: int) -> Aggregator:
        """The aggregator of round ``round_index`` over ``population`` clients."""
        rules = self.rules
        dp = dp_rounds(rules, population, self.schedule.sample_size(population),
                       self.schedule.rounds, self.earlier, self.noised)
        if dp is not None:
            dp.check_budget(round_index)
            return DpFedAvgAggregator(global_state, dp, self.seed, round_index, self.clip)
        inner = self.default(global_state, population) if rules.rule == "mean" else \
            RobustAggregator(global_state, rules.rule, self.scratch, rules.trim_fraction)
        if rules.clip_norm is None:
            return inner
        return ClippedAggregator(inner, global_state, rules.clip_norm)
