"""Regenerate the Android core's host-test fixtures from real ``pfl-export --golden`` output.

The Java core (android-demo/core) is tested against the model cards and golden vectors the
Python side writes. For each case this script runs a tiny ``pfl-sim`` federation on
Fashion-MNIST (3 rounds, 2 of 20 clients per round: the fixtures test the core's arithmetic
and card handling, not accuracy), exports one model with
``pfl-export --golden --golden-samples 4`` and copies ``model_card.json`` and ``golden.json``
(not the model files) into
``android-demo/core/src/test/resources/fixtures/<case>/``. The card still lists the .pte and
.onnx it was written with, and golden.json's sha256, which the Java tests check.

``--only trainer`` writes ``trainer/<method>/``: the card and ``personal_init.safetensors`` of a
``pfl-export --trainer`` export per method (SuPerFed-MM, FedRoD-linear with
``ft_scope = "personal_head"``, PFL-MFE), from docs/on-device.md's seconds-long digits run.

``--only safetensors`` writes ``safetensors/python.safetensors``: a few tensors of several
dtypes and string metadata, serialized by the Python ``safetensors`` library, which the core's
reader must parse to the values ``safetensors_fixture`` documents.

It also writes ``preprocess_cases.json``: seeded raw images through pflkit's
:class:`~pflkit.sdk.data.datasets.Preprocessing` for shapes the datasets do not cover
(3 channels, non-integer down- and up-scaling, pixel_scale 16), and RGB -> luma values from
Pillow's ``convert("L")``, which the core's camera-image path reproduces.

Run from the repository root (about 10 minutes on 2 busy cores)::

    .venv/bin/python android-demo/tools/make_fixtures.py            # everything
    .venv/bin/python android-demo/tools/make_fixtures.py --only preprocess
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

from pflkit.sdk.data.datasets import Preprocessing
from pflkit.sdk.seeding import numpy_rng

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "android-demo/core/src/test/resources/fixtures"
BIN = Path(sys.executable).parent
SIM_ARGS = ["--dataset", "fmnist", "--partition", "dirichlet", "--clients", "20", "--alpha",
            "0.5", "--rounds", "3", "--clients-per-round", "2", "--epochs", "1",
            "--eval-interval", "3", "--seed", "0"]
GOLDEN_SAMPLES = 4


@dataclass(frozen=True)
class Case:
    """One exported model: the federation it comes from and the pfl-export options."""

    name: str
    run: str  # runs are shared between cases with the same name here
    sim: tuple[str, ...]
    export: tuple[str, ...]


CASES = (
    Case("fedavg", "fedavg", ("--algorithm", "fedavg", "--model", "twonn"), ("--client", "0")),
    Case("superfed_mm_runtime", "superfed", ("--algorithm", "superfed_mm", "--model", "twonn"),
         ("--client", "0", "--lambda", "runtime")),
    Case("superfed_mm_fixed", "superfed", ("--algorithm", "superfed_mm", "--model", "twonn"),
         ("--client", "1", "--lambda", "0.3")),
    Case("fedrod_personalized", "fedrod",
         ("--algorithm", "fedrod_hyper", "--model", "fedrod_convnet"), ("--client", "0")),
    Case("fedrod_generic", "fedrod", ("--algorithm", "fedrod_hyper", "--model", "fedrod_convnet"),
         ("--head", "generic")),
    Case("fedrod_new_client", "fedrod",
         ("--algorithm", "fedrod_hyper", "--model", "fedrod_convnet"),
         ("--class-counts", "5,0,12,0,0,3,0,0,9,1")),
    Case("pflmoe_mfe", "pflmoe", ("--algorithm", "pflmoe", "--model", "lenet5", "--resize", "32",
                                  "--param", "variant=mfe", "--param", "epochs=1"),
         ("--client", "0")),
)


def run(cmd: list[str]) -> None:
    """Run a pflkit command single-threaded; its output is shown only when it fails."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PFLKIT_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)}")


def export_cases(work: Path, names: set[str] | None) -> None:
    """Simulate, export with golden vectors, and copy card + golden.json into the fixtures."""
    for case in CASES:
        if names and case.name not in names:
            continue
        run_dir = work / case.run
        if not run_dir.exists():
            run([str(BIN / "pfl-sim"), *SIM_ARGS, *case.sim, "--out", str(run_dir)])
        out = work / "exports" / case.name
        run([str(BIN / "pfl-export"), "--run", str(run_dir), *case.export,
             "--golden", "--golden-samples", str(GOLDEN_SAMPLES), "--out", str(out)])
        target = FIXTURES / case.name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for name in ("model_card.json", "golden.json"):
            shutil.copyfile(out / name, target / name)
        sys.stdout.write(f"{case.name}: {target.relative_to(ROOT)}\n")


def floats(t: torch.Tensor) -> list[float]:
    """Exact float32 values as JSON numbers (float32 -> double is exact)."""
    return [float(v) for v in t.flatten().tolist()]


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
        raw = rng.integers(0, int(pre.pixel_scale) + 1, size=(h, w, pre.channels))
        x = pre.apply(torch.from_numpy(raw.transpose(2, 0, 1).copy())[None])
        cases.append({"preprocessing": pre.to_dict(), "raw_shape": [h, w, pre.channels],
                      "raw": [int(v) for v in raw.flatten()], "input": floats(x)})
    rgb = rng.integers(0, 256, size=(64, 3), dtype=np.uint8)
    rgb[:4] = [[0, 0, 0], [255, 255, 255], [255, 0, 0], [1, 2, 3]]
    luma = np.asarray(Image.fromarray(rgb[None], mode="RGB").convert("L"))[0]
    return {"cases": cases,
            "luma": [[*map(int, c), int(v)] for c, v in zip(rgb, luma, strict=True)]}


TRAINER_CONFIG = ROOT / "docs/configs/on-device.toml"
TRAINER_CASES = {  # fixture name -> the on-device config's [algorithm] section
    "superfed_mm": None,  # as written
    "fedrod_linear": 'name = "fedrod_linear"\n[algorithm.params]\nft_epochs = 2\n'
                     'ft_scope = "personal_head"\n',
    "pflmoe_mfe": 'name = "pflmoe"\n[algorithm.params]\nvariant = "mfe"\nepochs = 1\n',
}


def trainer_cases(work: Path) -> None:
    """Export a training program per method; copy its card and initial weights."""
    base = TRAINER_CONFIG.read_text()
    head, _, rest = base.partition("[algorithm]\n")
    tail = rest[rest.index("[training]"):]
    for name, algorithm in TRAINER_CASES.items():
        config = work / f"{name}.toml"
        config.write_text(base if algorithm is None else f"{head}[algorithm]\n{algorithm}{tail}")
        run([str(BIN / "pfl-sim"), "--config", str(config), "--out", str(work / name)])
        out = work / f"{name}-app"
        run([str(BIN / "pfl-export"), "--run", str(work / name), "--client", "1", "--format",
             "executorch", "--trainer", "--out", str(out)])
        target = FIXTURES / "trainer" / name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for file in ("model_card.json", "personal_init.safetensors"):
            shutil.copyfile(out / file, target / file)
        sys.stdout.write(f"{name}: {target.relative_to(ROOT)}\n")


def safetensors_fixture() -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and metadata of ``safetensors/python.safetensors`` (SafetensorsTest)."""
    tensors = {
        "a.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.5 - 1,
        "counts": torch.tensor([1, -2, 2**40], dtype=torch.int64),
        "mask": torch.tensor([0, 1, 255, 7], dtype=torch.uint8),
        "double": torch.tensor([0.1, -1e300], dtype=torch.float64),
        "empty": torch.zeros(0, 4, dtype=torch.float32),
        "scalar": torch.tensor(3.25, dtype=torch.float32),
    }
    return tensors, {"metrics": '{"loss": 0.25}', "note": "caf\u00e9"}


def main() -> None:
    """Write the fixtures selected on the command line (default: all)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", metavar="CASE",
                        help="'preprocess', 'safetensors', 'trainer' and/or case names: "
                             f"{[c.name for c in CASES]}")
    parser.add_argument("--work", type=Path, help="keep runs and exports here (default: temp)")
    args = parser.parse_args()
    only = set(args.only) if args.only else None
    if only is None or "preprocess" in only:
        (FIXTURES / "preprocess_cases.json").write_text(json.dumps(preprocess_cases(0)) + "\n")
    if only is None or "safetensors" in only:
        (FIXTURES / "safetensors").mkdir(exist_ok=True)
        tensors, metadata = safetensors_fixture()
        save_file(tensors, FIXTURES / "safetensors/python.safetensors", metadata=metadata)
    if only is None or "trainer" in only:
        with tempfile.TemporaryDirectory(prefix="pflkit-android-trainer-") as tmp:
            trainer_cases(args.work or Path(tmp))
    only = only - {"preprocess", "safetensors", "trainer"} if only else None
    if only is None or only:
        with tempfile.TemporaryDirectory(prefix="pflkit-android-fixtures-") as tmp:
            export_cases(args.work or Path(tmp), only)


if __name__ == "__main__":
    main()
