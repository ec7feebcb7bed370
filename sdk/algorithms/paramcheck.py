"""One wording for out-of-range hyperparameters: the method, the parameter, the rule, the value."""

from __future__ import annotations

from pflkit.sdk.algorithms.base import HyperparameterError


def require(method: str, name: str, ok: bool, rule: str, value: object) -> None:
    """Raise ``HyperparameterError`` naming method and parameter unless ``ok``."""
    if not ok:
        raise HyperparameterError(
            f"{method}: hyperparameter '{name}' must be {rule}, got {value!r}"
        )
