"""SuPerFed exported with lambda as an input: int8 follows lambda; bad lambdas are defined.

Real files in the real runtimes (onnxruntime, the ExecuTorch Python runtime), compared with
the algorithm's own baked model W(lambda) at each lambda.
"""

from __future__ import annotations

import math

import pytest
import torch

from pflkit.export import Choice, export_model, load_run_source
from pflkit.export.formats import FORMATS
from pflkit.export.verify import INTERIOR

CLIENT = 1


@pytest.fixture(scope="module")
def runtime_export(make_run, tmp_path_factory):
    """fp32 and int8 runtime-lambda files of one SuPerFed-MM client, in both formats."""
    source = load_run_source(make_run("superfed_mm"), CLIENT)
    out = tmp_path_factory.mktemp("runtime") / "out"
    card = export_model(source, Choice({"lam": "runtime"}), out, int8=True, force_int8=True).card
    return source, out, card


def baked(source, lam: float, x: torch.Tensor) -> torch.Tensor:
    module = source.algorithm.inference.personalized_model(source.global_state, source.client_state,
                                                           Choice({"lam": lam}))
    with torch.no_grad():
        return module(x)


def test_int8_runtime_lambda_follows_lambda_in_both_runtimes(runtime_export):
    source, out, card = runtime_export
    chosen = source.client_state.meta["lambda"]
    x = source.test.x
    for fmt in FORMATS.values():
        run = fmt.load(out / f"model_int8.{fmt.suffix}")
        for lam in (0.0, INTERIOR, chosen, 1.0):
            reference = baked(source, lam, x).argmax(1)
            got = run((x, torch.tensor([lam])))[0].argmax(1)
            agreement = float((got == reference).float().mean())
            assert agreement >= 0.9, f"{fmt.name} int8 at lam = {lam}: {agreement:.3f}"


def test_the_card_records_int8_accuracy_at_every_checked_lambda(runtime_export):
    source, _, card = runtime_export
    chosen = source.client_state.meta["lambda"]
    wanted = sorted({0.0, INTERIOR, chosen, 1.0})
    int8 = [p for p in card["parity"] if p["precision"] == "int8"]
    assert [p["file"] for p in int8] == ["model_int8.onnx", "model_int8.pte"]
    for entry in int8:
        assert entry["values_checked"] == wanted
        assert [p["value"] for p in entry["per_value"]] == wanted
        drops = [p["test_top1_eager"] - p["test_top1_artifact"] for p in entry["per_value"]]
        assert entry["accuracy_drop_points"] == pytest.approx(100 * max(drops))
        assert all(p["top1_agreement"] >= 0.9 for p in entry["per_value"])


def test_the_card_describes_the_lambda_input(runtime_export):
    source, _, card = runtime_export
    chosen = source.client_state.meta["lambda"]
    assert card["inputs"][1] == {"name": "lam", "shape": [1], "dtype": "float32",
                                 "range": [0.0, 1.0], "default": chosen, "nan": chosen}
    for entry in card["parity"]:
        assert entry["clamp_checked"] == ["-0.5", "1.5", "-inf", "inf", "nan"]


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_lambda_outside_the_range_is_clamped_and_nan_is_the_default(runtime_export, precision):
    source, out, _ = runtime_export
    chosen = source.client_state.meta["lambda"]
    x = source.test.x[:16]
    cases = [(1.5, 1.0), (-0.5, 0.0), (math.inf, 1.0), (-math.inf, 0.0), (1e30, 1.0),
             (math.nan, chosen)]
    suffix = "" if precision == "fp32" else "_int8"
    for fmt in FORMATS.values():
        run = fmt.load(out / f"model{suffix}.{fmt.suffix}")
        for value, same_as in cases:
            got = run((x, torch.tensor([value])))[0]
            assert torch.isfinite(got).all(), (fmt.name, value)
            assert torch.equal(got, run((x, torch.tensor([same_as])))[0]), (fmt.name, value)
            if precision == "fp32":
                torch.testing.assert_close(got, baked(source, same_as, x), atol=1e-4, rtol=0)


def test_eager_runtime_module_clamps_like_the_files(make_run):
    source = load_run_source(make_run("superfed_mm"), CLIENT)
    module = source.algorithm.inference.personalized_model(source.global_state, source.client_state,
                                                           Choice({"lam": "runtime"}))
    x = source.test.x[:8]
    with torch.no_grad():
        for value, same_as in ((2.0, 1.0), (-3.0, 0.0), (math.nan, module.nan_lambda)):
            torch.testing.assert_close(module(x, torch.tensor([value])),
                                       baked(source, same_as, x))
