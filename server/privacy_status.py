"""What a run's status says about its privacy: epsilon spent, the budget and what is left.

Read by the HTTP workers (``GET /v1/runs/...``), which never import PyTorch or the accountant:
the round keeper writes epsilon into each closed round's metrics (``dp_epsilon``, as pfl-sim's
``metrics.jsonl`` rows have it), and the settings come from the run's TOML and the server's
floor (:meth:`~pflkit.sdk.aggregation_config.AggregationConfig.at_least`).
"""

from __future__ import annotations

import tomllib
from typing import Any

from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.config_types import stored_settings

ACCOUNTANT = "RDP (dp-accounting), fixed-size sampling without replacement, replace-one"
# under SecAgg the device noise guards against the server, which draws the sample
SECAGG_ACCOUNTANT = ("RDP (dp-accounting), no amplification by sampling (secure aggregation: "
                     "each round counts as if every client took part), replace-one")


def accountant(rules: AggregationConfig) -> str:
    """How epsilon was accounted for a run of ``rules`` (sdk/privacy_accounting.dp_rounds)."""
    return SECAGG_ACCOUNTANT if rules.secagg else ACCOUNTANT
SERVER_KEYS = ("dp_epsilon", "dp_delta", "dp_noise_multiplier", "dp_population",
               "dp_clients_per_round")  # a served global state's metadata (export reads it)


def run_aggregation(config_toml: str, floor: AggregationConfig) -> AggregationConfig:
    """The ``[aggregation]`` a stored run gets on this server.

    Its config passed the floor when the run was created; if the operator restarted the
    server with a floor the run cannot meet, its rounds fail to close (the keeper's log says
    why) and the status shows the run's own settings.
    """
    with stored_settings():
        own = AggregationConfig(**tomllib.loads(config_toml).get("aggregation", {}))
    try:
        return own.at_least(floor)
    except ValueError:
        return own


def privacy_status(rules: AggregationConfig, history: list[dict[str, Any]]
                   ) -> dict[str, Any] | None:
    """The ``privacy`` block of a run's status (None for a run without DP).

    ``history`` is the status's closed rounds, oldest first; epsilon is the one recorded at
    the last of them (0 before any round closed). The noise multiplier of a run calibrated
    from ``dp_target_epsilon`` is known once its first round closed (None until then); the
    clip norm is the one the last round used (adaptive clipping moves it from round to round).
    """
    if rules.dp_clip_norm is None:
        return None
    last = next((r["metrics"] for r in reversed(history) if "dp_epsilon" in r["metrics"]), {})
    spent = float(last.get("dp_epsilon", 0.0))
    budget = rules.dp_max_epsilon
    return {"epsilon": spent, "delta": rules.dp_delta, "rounds": len(history),
            "noise_multiplier": last.get("dp_noise_multiplier", rules.dp_noise_multiplier),
            "target_epsilon": rules.dp_target_epsilon,
            "clip_norm": last.get("dp_clip_norm", rules.dp_clip_norm),
            "max_epsilon": budget, "epsilon_left": None if budget is None else budget - spent,
            "accountant": accountant(rules)}


def server_metadata(spent: dict[str, float], population: int, sample_size: int
                    ) -> dict[str, str]:
    """What a served round's global state records of its privacy (empty without DP)."""
    if not spent:
        return {}
    return {**{k: repr(v) for k, v in spent.items()}, "dp_population": str(population),
            "dp_clients_per_round": str(sample_size)}


