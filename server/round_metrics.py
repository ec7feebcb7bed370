"""A closed round's metrics: the clients' reported ones, merged, and the noise it recorded."""

from __future__ import annotations

import math
from typing import Any

from pflkit.server.orm import Update


def round_metrics(updates: list[Update] | Any) -> dict[str, Any]:
    """Sample-weighted mean of each metric the clients reported, plus participation.

    The server's own counts win over a metric a client reported under the same name.
    """
    total = sum(u.num_samples for u in updates)
    out: dict[str, Any] = {"participants": len(updates), "samples": total}
    keys = sorted({k for u in updates for k in u.metrics} - set(out))
    for key in keys:
        rows = [(u.metrics[key], u.num_samples) for u in updates if key in u.metrics]
        weight = sum(n for _, n in rows)
        if weight > 0:  # a convex mean: finite uploads (even 1e308) give a finite mean
            out[key] = math.fsum(v * (n / weight) for v, n in rows)
    return out


def recorded_noise(metrics: dict[str, Any] | None) -> float | None:
    """The noise multiplier a closed round's metrics recorded (None: none, or not a number)."""
    z = (metrics or {}).get("dp_noise_multiplier")
    if isinstance(z, bool) or not isinstance(z, int | float) or not math.isfinite(z) or z <= 0:
        return None
    return float(z)
