"""Golden vectors (``golden.json``, schema ``pflkit.golden/1``) from real dataset images.

The dataset loaders keep only preprocessed tensors, so raw pixels are recovered from images
at their NATIVE size: ``x * std + mean`` times the pixel scale is then the stored integer
pixel up to float rounding. The inversion is checked (every value within 1e-3 of an integer in
0..255) and refused otherwise, so the raw bytes are exactly the dataset's images. The export's
own test rows (the client's) are used when they invert (no resize); otherwise the dataset's
test split is reloaded at native size (e.g. LeNet-5's 32x32 from 28x28 images). The synthetic
set has no integer pixels and is refused. The model input is computed from those bytes with
the card's preprocessing (resizing when the model wants another size), exactly as another
runtime would.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from pflkit.export.contract import Exportable, ExportError
from pflkit.export.source import Source
from pflkit.sdk.data.datasets import Preprocessing, load_dataset

GOLDEN_SCHEMA = "pflkit.golden/1"
TOP_K = 3
MAX_GOLDEN_SAMPLES = 1000  # --golden-samples: 1..this (docs/export.md)
MAX_CLASSIFY_IMAGES = 10000  # pfl-export classify --count: 1..this (docs/export.md)


def _raw_pixels(x: torch.Tensor, pre: Preprocessing) -> np.ndarray | None:
    """Undo ``pre`` on native-size inputs: uint8 pixels, or None if they are not integers."""
    mean = torch.tensor(pre.mean, dtype=torch.float64).view(1, -1, 1, 1)
    std = torch.tensor(pre.std, dtype=torch.float64).view(1, -1, 1, 1)
    pixels = (x.double() * std + mean) * pre.pixel_scale
    rounded = pixels.round()
    if float((pixels - rounded).abs().max()) > 1e-3 or rounded.min() < 0 or rounded.max() > 255:
        return None
    return rounded.to(torch.uint8).numpy()


def raw_test_images(dataset: dict[str, Any], count: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the first ``count`` images of the dataset's test split, uint8 (N, C, H, W)."""
    native = load_dataset(dataset["name"], dataset.get("root"), None, seed=dataset.get("seed", 0))
    raw = _raw_pixels(native.test.x[:count], native.spec.preprocessing)
    if raw is None:
        raise ExportError(f"dataset '{dataset['name']}' has no integer 0..255 raw pixels to "
                          f"write golden vectors from")
    return raw, native.test.y[:count].numpy()


def check_golden_data(source: Source) -> None:
    """Golden vectors are raw pixels and their inputs: image datasets only (one line else)."""
    if not isinstance(source.spec.preprocessing, Preprocessing):
        raise ExportError(f"--golden needs image data (raw pixels to preprocess on the device); "
                          f"dataset '{source.dataset['name']}' has "
                          f"{type(source.spec.preprocessing).__name__} rows")


def raw_images(source: Source, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Return ``count`` raw test images: the export's own rows if they invert exactly.

    Fewer test images than ``count`` is an error rather than a silently shorter list.
    """
    if count < 1:
        raise ExportError(f"the number of test images must be at least 1, got {count}")
    check_golden_data(source)
    raw = _raw_pixels(source.test.x[:count], source.spec.preprocessing)
    raw, labels = (raw, source.test.y[:count].numpy()) if raw is not None else \
        raw_test_images(source.dataset, count)
    if len(raw) < count:
        raise ExportError(f"asked for {count} test images, but there are only {len(raw)}")
    return raw, labels


def golden_document(source: Source, ex: Exportable, count: int, card_file: str) -> dict[str, Any]:
    """``count`` samples: raw HWC bytes, the NCHW input, logits, softmax and top-k."""
    raw, labels = raw_images(source, count)
    inputs = source.spec.preprocessing.apply(torch.from_numpy(raw))
    logits = ex.eager(*ex.feeds(inputs))[0]
    probs = logits.double().softmax(dim=1)
    samples = []
    for i in range(len(raw)):
        top = probs[i].topk(min(TOP_K, probs.shape[1]))
        sample: dict[str, Any] = {
            "label": int(labels[i]), "raw_shape": list(raw[i].transpose(1, 2, 0).shape),
            "raw": raw[i].transpose(1, 2, 0).reshape(-1).tolist(),
            "input": inputs[i].reshape(-1).tolist(), "logits": logits[i].tolist(),
            "probabilities": probs[i].tolist(),
            "top_k": [[int(c), float(p)] for p, c in zip(top.values, top.indices, strict=True)],
        }
        if ex.runtime is not None:
            sample[ex.runtime.name] = ex.runtime.default
        samples.append(sample)
    return {"schema_version": GOLDEN_SCHEMA, "card": card_file, "samples": samples}
