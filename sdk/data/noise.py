"""Label noise for the SuPerFed robustness protocol (paper appendix A.4), train labels only.

pair: y -> (y + 1) mod C with probability eps. symmetric: y -> each other class with
probability eps / (C - 1). Both are the rows of the paper's noise transition matrices.
"""

from __future__ import annotations

import numpy as np

NOISE_KINDS = ("pair", "symmetric")


def transition_matrix(kind: str, eps: float, num_classes: int) -> np.ndarray:
    """The (C, C) row-stochastic matrix T[i, j] = P(noisy = j | clean = i)."""
    if kind not in NOISE_KINDS:
        raise ValueError(f"unknown label noise '{kind}'; known: {', '.join(NOISE_KINDS)}")
    if not 0.0 <= eps <= 1.0:
        raise ValueError(f"noise rate must be in [0, 1], got {eps}")
    if kind == "symmetric" and num_classes < 2:  # no other class to flip a label to
        raise ValueError(f'data.noise = "symmetric" needs at least 2 classes, the dataset has '
                         f"{num_classes}")
    eye = np.eye(num_classes)
    if kind == "pair":
        return (1 - eps) * eye + eps * np.roll(eye, 1, axis=1)
    return (1 - eps) * eye + eps / (num_classes - 1) * (1 - eye)


def apply_label_noise(
    labels: np.ndarray, kind: str, eps: float, num_classes: int, rng: np.random.Generator
) -> np.ndarray:
    """A noisy copy of ``labels`` drawn from :func:`transition_matrix`."""
    t = transition_matrix(kind, eps, num_classes)
    cumulative = np.cumsum(t[labels], axis=1)
    u = rng.random(len(labels))[:, None]
    noisy = (u < cumulative).argmax(axis=1)
    return noisy.astype(labels.dtype)
