"""The model card's ``privacy`` block: what DP-FedAvg guarantees for an exported model.

The guarantee is user-level central DP on the shared tensors (docs/privacy.md): what devices
upload is clipped and noised on the server. An exported model is built from those tensors and
from the personal part its device trained on its own data: that part never left the device, so
no noise covers it, and the card says so. A run without DP writes ``"privacy": null``.

A pfl-sim run directory is accounted here from its config (the same call its
``metrics.jsonl`` rows come from); a pfl-server run's global state carries the numbers the
round keeper accounted (its roster is not known on the host that exports).
"""

from __future__ import annotations

from typing import Any

from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.privacy_accounting import privacy_spent
from pflkit.sdk.run_config import Schedule
from pflkit.server.privacy_status import SERVER_KEYS, accountant

MECHANISM = "DP-FedAvg: user-level central DP, Gaussian noise on the sum of clipped updates"
COVERS = ("the shared tensors (shared_tensors): every tensor a device uploads is clipped and "
          "noised before it reaches the global model")
NOT_COVERED = ("the personal part: weights trained on the device's own data (a personal head, "
               "local layers, fine-tuning, a mixture's local model) never leave the device, so "
               "no noise covers them: they have NO differential-privacy guarantee")


def privacy_block(rules: AggregationConfig, rounds: int, spent: dict[str, float],
                  population: int, sample_size: int, shared: list[str]) -> dict[str, Any] | None:
    """The card's ``privacy`` (None for a run without DP)."""
    if rules.dp_clip_norm is None or not spent:
        return None
    return {"mechanism": MECHANISM, "epsilon": spent["dp_epsilon"], "delta": spent["dp_delta"],
            "rounds": rounds, "noise_multiplier": spent["dp_noise_multiplier"],
            "clip_norm": rules.dp_clip_norm,
            "sampling": {"kind": "fixed-size without replacement" + (
                             ", not amplifying (secure aggregation)" if rules.secagg else ""),
                         "clients_per_round": sample_size, "population": population},
            "accountant": accountant(rules), "covers": COVERS, "shared_tensors": sorted(shared),
            "not_covered": NOT_COVERED}


def simulated(rules: AggregationConfig, schedule: Schedule, population: int, rounds: int,
              shared: list[str]) -> dict[str, Any] | None:
    """The block of a pfl-sim model after ``rounds`` rounds on ``population`` clients."""
    return privacy_block(rules, rounds, privacy_spent(rules, schedule, population, rounds),
                         population, schedule.sample_size(population), shared)


def of_global_file(rules: AggregationConfig, schedule: Schedule, simulated_population: int,
                   rounds: int, metadata: dict[str, str], shared: list[str]
                   ) -> dict[str, Any] | None:
    """The block of a model built on a global state file.

    pfl-server's files carry the numbers its round keeper accounted (its roster); any other
    (pfl-sim's checkpoints) is accounted like a run directory, on ``simulated_population``.
    """
    if not all(k in metadata for k in SERVER_KEYS):
        return simulated(rules, schedule, simulated_population, rounds, shared)
    spent = {k: float(metadata[k]) for k in SERVER_KEYS[:3]}
    return privacy_block(rules, rounds, spent, int(metadata["dp_population"]),
                         int(metadata["dp_clients_per_round"]), shared)
