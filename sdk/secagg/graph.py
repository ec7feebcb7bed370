"""SecAgg+'s sparse neighbour graph (Bell et al. 2020), drawn from the round's public seed.

What the paper leaves open, and what we chose: a random k-regular Harary graph. The roster is
shuffled by SHA-256(seed, id) and each device is joined to the k/2 devices on either side of it
in that ring, so every device has exactly k neighbours and everyone computes the same graph.
``k >= n - 1`` is the complete graph of the original SecAgg.
"""

from __future__ import annotations

import hashlib
import struct

from pflkit.sdk.secagg.messages import RoundSetup


def neighbourhoods(setup: RoundSetup) -> dict[int, tuple[int, ...]]:
    """``{id: its neighbours, sorted}`` (a device is not its own neighbour)."""
    roster = setup.roster
    n = len(roster)
    if setup.neighbours >= n - 1:
        return {c: tuple(o for o in roster if o != c) for c in roster}
    ring = sorted(roster, key=lambda c: hashlib.sha256(
        setup.graph_seed + struct.pack(">Q", c)).digest())
    half = setup.neighbours // 2
    return {c: tuple(sorted(ring[(p + j) % n] for j in range(-half, half + 1) if j))
            for p, c in enumerate(ring)}


def holders(neighbours: dict[int, tuple[int, ...]], owner: int) -> tuple[int, ...]:
    """Who holds shares of ``owner``'s secrets, in x-coordinate order (x = index + 1)."""
    return tuple(sorted((owner, *neighbours[owner])))
