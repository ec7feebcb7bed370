"""Seeds derived from one run seed, so partitions, sampling and inits are reproducible.

Every random choice in pflkit takes its seed from ``derive_seed(run_seed, purpose, ...)``
rather than from a shared global generator: a client's training in round 7 then does not
depend on how many random numbers other clients drew before it, which is what makes
``--resume`` and the HTTP server (clients arriving in any order) bit-identical to one
uninterrupted simulation.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator

import numpy as np
import torch

# the global torch RNG is the process's: threads (runs side by side in one process, each on its
# own CUDA stream) take turns in seeded blocks, or one's draws would land in another's model
_GLOBAL_RNG = threading.RLock()


def derive_seed(seed: int, *keys: object) -> int:
    """Return a 63-bit seed determined by ``seed`` and the ``keys`` naming a purpose."""
    text = "/".join([str(int(seed)), *(str(k) for k in keys)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def numpy_rng(seed: int, *keys: object) -> np.random.Generator:
    """A numpy Generator for one purpose (partitioning, sampling, noise)."""
    return np.random.default_rng(derive_seed(seed, *keys))


def torch_generator(seed: int, *keys: object) -> torch.Generator:
    """A CPU torch Generator for one purpose (batch order, lambda draws)."""
    gen = torch.Generator()
    gen.manual_seed(derive_seed(seed, *keys))
    return gen


@contextlib.contextmanager
def seeded_torch(seed: int, *keys: object) -> Iterator[None]:
    """Run a block (e.g. building a model, whose layers use the global RNG) under a seed.

    The global torch RNG state is restored afterwards, so the block leaves no trace; one
    thread at a time runs such a block.
    """
    with _GLOBAL_RNG, torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, *keys))
        yield
