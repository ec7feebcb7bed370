"""Label noise for the SuPerFed robustness protocol (paper appendix A.4), train labels only.

pair: y -> (y + 1) mod C with probability eps. symmetric: y -> each other class with
probability eps / (C - 1). Both are the rows of the paper's noise transition matrices.

Noise is drawn one row of the matrix at a time, for the classes present: the whole (C, C)
matrix took 1.4 GiB and 8 s for 200 labels of 8,000 classes (80 GB at 100,000).
"""

from __future__ import annotations

import numpy as np

NOISE_KINDS = ("pair", "symmetric")


def _check(kind: str, eps: float, num_classes: int) -> None:
    if kind not in NOISE_KINDS:
        raise ValueError(f"unknown label noise '{kind}'; known: {', '.join(NOISE_KINDS)}")
    if not 0.0 <= eps <= 1.0:
        raise ValueError(f"noise rate must be in [0, 1], got {eps}")
    if kind == "symmetric" and num_classes < 2:  # no other class to flip a label to
        raise ValueError(f'data.noise = "symmetric" needs at least 2 classes, the dataset has '
                         f"{num_classes}")


def _row(kind: str, eps: float, num_classes: int, clean: int) -> np.ndarray:
    """Row ``clean`` of the transition matrix: P(noisy = j | clean), (C,) float64."""
    if kind == "pair":
        row = np.zeros(num_classes)
        row[clean] = 1 - eps
        row[(clean + 1) % num_classes] += eps  # one class: both on the diagonal
    else:
        row = np.full(num_classes, eps / (num_classes - 1))
        row[clean] = 1 - eps
    return row


def transition_matrix(kind: str, eps: float, num_classes: int) -> np.ndarray:
    """The (C, C) row-stochastic matrix T[i, j] = P(noisy = j | clean = i)."""
    _check(kind, eps, num_classes)
    return np.stack([_row(kind, eps, num_classes, c) for c in range(num_classes)])


def apply_label_noise(
    labels: np.ndarray, kind: str, eps: float, num_classes: int, rng: np.random.Generator
) -> np.ndarray:
    """A noisy copy of ``labels`` drawn from :func:`transition_matrix`.

    Label y becomes the first class j whose cumulative row sum T[y, :j + 1] exceeds a uniform
    draw u (one draw per label, in order).
    """
    _check(kind, eps, num_classes)
    u = rng.random(len(labels))
    noisy = np.empty_like(labels)
    order = np.argsort(labels, kind="stable")
    classes, starts = np.unique(labels[order], return_index=True)
    for clean, rows in zip(classes, np.split(order, starts)[1:], strict=True):
        cumulative = np.cumsum(_row(kind, eps, num_classes, int(clean)))
        picked = np.searchsorted(cumulative, u[rows], side="right")
        noisy[rows] = np.where(picked < num_classes, picked, 0)  # u past a sum rounded below 1
    return noisy
