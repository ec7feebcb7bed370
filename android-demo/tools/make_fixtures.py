"""Write host-test fixtures for the Android demo's Java core without ``pfl-export``.

The Java core (android-demo/core) is tested against model cards and golden vectors that the
Python side writes. ``pfl-export --golden`` is the real producer (see docs/android.md); this
script is the stand-in and the producer of the preprocessing-only cases. It writes, under
``--out`` (default: the core's test resources):

- ``<case>/model_card.json`` + ``<case>/golden.json`` per method (schema: docs/model-card.md),
  built from real Fashion-MNIST test images, the dataset registry's own
  :class:`~pflkit.sdk.data.datasets.Preprocessing`, and small seeded models whose logits come
  from eager PyTorch: a plain model (FedAvg), two weight sets mixed by a runtime lambda
  (SuPerFed-MM), a generic plus a personalized head (FedRoD), LeNet-5 on images resized to
  32x32 (PFL-MoE). The weights are untrained: the fixtures test the core's arithmetic, not
  accuracy.
- ``preprocess_cases.json``: seeded raw images through Preprocessing.apply for shapes the
  datasets do not cover (3 channels, non-integer down- and up-scaling, pixel_scale 16), and
  RGB -> luma values from Pillow's ``convert("L")``.

Run from the repository root: ``.venv/bin/python android-demo/tools/make_fixtures.py``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pflkit.sdk.data.datasets import FMNIST_CLASSES, Preprocessing, read_idx
from pflkit.sdk.models import build_model
from pflkit.sdk.seeding import numpy_rng
from PIL import Image
from torch.func import functional_call

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "android-demo/core/src/test/resources/fixtures"
SAMPLES = 4  # golden samples per method: enough to cover several classes, small to commit
LAMBDAS = (0.0, 0.3, 1.0)  # runtime-lambda samples cycle through these (both endpoints)

Logits = Callable[[torch.Tensor, float | None], dict[str, torch.Tensor]]


def floats(t: torch.Tensor) -> list[float]:
    """Exact float32 values as JSON numbers (float32 -> double is exact)."""
    return [float(v) for v in t.detach().to(torch.float32).flatten().tolist()]


def fmnist_images(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` raw uint8 FMNIST test images (N, 28, 28) from distinct classes, and labels."""
    folder = Path("/usr/share/datasets/fashion-mnist")
    images = read_idx(folder / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(folder / "t10k-labels-idx1-ubyte.gz")
    order = numpy_rng(seed, "android-fixtures").permutation(len(labels))
    picked: list[int] = []
    for i in order:
        if labels[i] not in {labels[j] for j in picked}:
            picked.append(int(i))
        if len(picked) == count:
            break
    return images[picked], labels[picked].astype(np.int64)


def card(algorithm: str, model: str, pre: Preprocessing, outputs: list[str],
         mixture: dict[str, Any] | None) -> dict[str, Any]:
    """Build a model card (docs/model-card.md) with no artifacts: no model files are written."""
    c, (h, w) = pre.channels, pre.size
    inputs: list[dict[str, Any]] = [
        {"name": "image", "shape": ["batch", c, h, w], "dtype": "float32", "layout": "NCHW"}
    ]
    if mixture and mixture.get("lambda") == "runtime":
        inputs.append({"name": "lam", "shape": [1], "dtype": "float32", "range": [0.0, 1.0]})
    return {
        "schema_version": "pflkit.model-card/1",
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "algorithm": algorithm,
        "model": model,
        "inputs": inputs,
        "outputs": [{"name": n, "shape": ["batch", len(FMNIST_CLASSES)], "dtype": "float32",
                     "meaning": "logits"} for n in outputs],
        "preprocessing": pre.to_dict(),
        "classes": list(FMNIST_CLASSES),
        "mixture": mixture,
        "source": {"run": "android-demo/tools/make_fixtures.py", "round": 0, "client": 0,
                   "new_client": False},
        "artifacts": [],
        "parity": [],
    }


def golden(pre: Preprocessing, forward: Logits, runtime_lambda: bool, seed: int
           ) -> dict[str, Any]:
    """Golden samples: raw HWC pixels, preprocessed input, logits, softmax, top-3."""
    raw, labels = fmnist_images(SAMPLES, seed)
    samples = []
    for i, (img, label) in enumerate(zip(raw, labels, strict=True)):
        x = pre.apply(torch.from_numpy(img.copy())[None, None])  # (1, C, H, W)
        lam = LAMBDAS[i % len(LAMBDAS)] if runtime_lambda else None
        with torch.no_grad():
            logits = forward(x, lam)["logits"][0]
        probs = torch.softmax(logits, dim=0)
        top = torch.topk(probs, 3)
        sample: dict[str, Any] = {
            "label": int(label),
            "raw_shape": [img.shape[0], img.shape[1], 1],
            "raw": [int(v) for v in img.flatten()],  # HWC with C = 1
            "input": floats(x),
            "logits": floats(logits),
            "probabilities": floats(probs),
            "top_k": [[int(j), float(p)] for p, j in zip(top.values, top.indices, strict=True)],
        }
        if lam is not None:
            sample["lam"] = lam
        samples.append(sample)
    return {"schema_version": "pflkit.golden/1", "card": "model_card.json", "samples": samples}


def plain(model_name: str, pre: Preprocessing, seed: int) -> Logits:
    """One seeded model: FedAvg-style or PFL-MoE-style export (one logits output)."""
    net = build_model(model_name, (pre.channels, *pre.size), len(FMNIST_CLASSES), seed).eval()
    return lambda x, lam: {"logits": net(x)}


def mixed(model_name: str, pre: Preprocessing, seed: int) -> Logits:
    """SuPerFed-MM: parameters (1 - lam) * w_f + lam * w_l, lam given at run time."""
    shape = (pre.channels, *pre.size)
    net = build_model(model_name, shape, len(FMNIST_CLASSES), seed).eval()
    w_f = dict(net.named_parameters())
    w_l = dict(build_model(model_name, shape, len(FMNIST_CLASSES), seed + 1).named_parameters())

    def forward(x: torch.Tensor, lam: float | None) -> dict[str, torch.Tensor]:
        assert lam is not None
        params = {k: (1 - lam) * w_f[k] + lam * w_l[k] for k in w_f}
        return {"logits": functional_call(net, params, (x,))}

    return forward


def two_heads(model_name: str, pre: Preprocessing, seed: int) -> Logits:
    """FedRoD: personalized logits = generic head + personalized head on the same features."""
    shape = (pre.channels, *pre.size)
    net = build_model(model_name, shape, len(FMNIST_CLASSES), seed).eval()
    personal = build_model(model_name, shape, len(FMNIST_CLASSES), seed + 1).head.eval()

    def forward(x: torch.Tensor, lam: float | None) -> dict[str, torch.Tensor]:
        z = net.body(x)
        generic = net.head(z)
        return {"logits": generic + personal(z), "generic_logits": generic}

    return forward


def write_case(out: Path, name: str, card_json: dict[str, Any], gold: dict[str, Any]) -> None:
    """One fixture folder: model_card.json and golden.json."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model_card.json").write_text(json.dumps(card_json, indent=1) + "\n")
    (folder / "golden.json").write_text(json.dumps(gold) + "\n")


def preprocess_cases(seed: int) -> dict[str, Any]:
    """Seeded raw images through Preprocessing.apply, plus Pillow luma reference values."""
    rng = numpy_rng(seed, "android-preprocess-cases")
    specs = [  # (preprocessing, raw H, raw W)
        (Preprocessing(3, (4, 3), (0.4914, 0.4822, 0.4465), (0.247, 0.2435, 0.2616)), 5, 7),
        (Preprocessing(1, (7, 5), (0.286,), (0.353,)), 3, 3),
        (Preprocessing(1, (28, 28), (0.3,), (0.37,), pixel_scale=16.0), 8, 8),
        (Preprocessing(3, (6, 6), (0.5, 0.5, 0.5), (0.25, 0.5, 1.0)), 6, 6),
        (Preprocessing(1, (32, 32), (0.286,), (0.353,)), 28, 28),
    ]
    cases = []
    for pre, h, w in specs:
        top = int(pre.pixel_scale)
        raw = rng.integers(0, top + 1, size=(h, w, pre.channels))
        x = pre.apply(torch.from_numpy(raw.transpose(2, 0, 1).copy())[None])
        cases.append({"preprocessing": pre.to_dict(), "raw_shape": [h, w, pre.channels],
                      "raw": [int(v) for v in raw.flatten()], "input": floats(x)})
    rgb = rng.integers(0, 256, size=(64, 3), dtype=np.uint8)
    rgb[:4] = [[0, 0, 0], [255, 255, 255], [255, 0, 0], [1, 2, 3]]
    luma = np.asarray(Image.fromarray(rgb[None], mode="RGB").convert("L"))[0]
    return {"cases": cases,
            "luma": [[*map(int, c), int(v)] for c, v in zip(rgb, luma, strict=True)]}


def main() -> None:
    """Write every fixture under --out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    fmnist = Preprocessing(1, (28, 28), (0.2860,), (0.3530,))
    fmnist32 = Preprocessing(1, (32, 32), (0.2860,), (0.3530,))
    superfed = {"kind": "superfed", "lambda": "runtime", "mode": "mm"}
    fedrod = {"kind": "fedrod", "head": "personalized"}
    cases = [  # name, algorithm, model, preprocessing, outputs, mixture, forward
        ("fedavg", "fedavg", "twonn", fmnist, ["logits"], None, plain),
        ("superfed_mm_runtime", "superfed_mm", "twonn", fmnist, ["logits"], superfed, mixed),
        ("fedrod_personalized", "fedrod", "fedrod_convnet", fmnist,
         ["logits", "generic_logits"], fedrod, two_heads),
        ("pflmoe_mfe", "pflmoe_mfe", "lenet5", fmnist32, ["logits"],
         {"kind": "pflmoe", "variant": "mfe"}, plain),
    ]
    for name, algorithm, model, pre, outputs, mixture, make in cases:
        forward = make(model, pre, args.seed)
        runtime = bool(mixture and mixture.get("lambda") == "runtime")
        write_case(args.out, name, card(algorithm, model, pre, outputs, mixture),
                   golden(pre, forward, runtime, args.seed))
    (args.out / "preprocess_cases.json").write_text(json.dumps(preprocess_cases(args.seed)) + "\n")


if __name__ == "__main__":
    main()
