"""The server's check of an update its device clipped (``dp_clip_on_device``), without PyTorch.

A device that clips scales its change to the round's global state, over all floating tensors
at once, to L2 norm <= C in float64, then casts each value back to its tensor's dtype
(:func:`~pflkit.sdk.aggregation_rules.clip_update`). That cast moves each value ``u_k`` by at
most one unit in its last place, ``eps * |u_k|`` (``eps`` = 2^-23 for float32), so the server
accepts ``||u - g|| <= C * (1 + 1e-6) + ||eps * u||`` (the 1e-6 covers the float64 sums) and
refuses anything larger: an update its device did not clip is over by far more than rounding.
The DP rule still clips what it folds, so the guarantee never rests on this tolerance. Read
like ``update_check``: numpy on the raw safetensors bytes, ``_BLOCK`` values at a time.
"""

from __future__ import annotations

import math

import numpy as np

from pflkit.server.update_check import SafetensorsLayout, TensorSpan, read_layout

RELATIVE_SLACK = 1e-6  # of C: float64 summation over millions of values
# floating dtypes whose values numpy can read: the little-endian view and one unit in the last
# place relative to the value (float8 is not checked: an update holding one is refused)
_FLOATS = {"F64": ("<f8", 2.0 ** -52), "F32": ("<f4", 2.0 ** -23),
           "F16": ("<f2", 2.0 ** -10), "BF16": ("<u2", 2.0 ** -7)}
_BLOCK = 8192


def _values(data: memoryview, span: TensorSpan, start: int, stop: int) -> np.ndarray:
    """Values ``start:stop`` of a floating tensor as float64."""
    view, _ = _FLOATS[span.dtype]
    raw = np.frombuffer(data[span.start:span.end], dtype=view)[start:stop]
    if span.dtype == "BF16":  # the upper half of a float32
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return raw.astype(np.float64)


def clip_problem(update: bytes, layout: SafetensorsLayout, global_state: bytes,
                 clip_norm: float) -> str | None:
    """Why the update's change to the global state is over ``clip_norm`` (None: it is not)."""
    base = read_layout(global_state)
    up, glob = memoryview(update), memoryview(global_state)
    squared = rounding = 0.0
    for name, span in layout.tensors.items():
        if span.dtype.startswith("F8"):
            return f"tensor '{name}' is {span.dtype}: its clip norm cannot be checked"
        if span.dtype not in _FLOATS:
            continue
        eps = _FLOATS[span.dtype][1]
        size = math.prod(span.shape)
        for start in range(0, size, _BLOCK):
            u = _values(up, span, start, start + _BLOCK)
            g = _values(glob, base.tensors[name], start, start + _BLOCK)
            with np.errstate(over="ignore"):  # an F64 change past 1e154 squares to inf
                squared += float(((u - g) ** 2).sum())
                rounding += float(((eps * u) ** 2).sum())
    norm, bound = math.sqrt(squared), clip_norm * (1 + RELATIVE_SLACK) + math.sqrt(rounding)
    if norm > bound or math.isinf(norm):  # inf > inf is False: huge values widen the bound too
        return (f"its change has L2 norm {norm:.6g}, over the round's clip norm {clip_norm:g} "
                f"(devices clip: aggregation.dp_clip_on_device)")
    return None
