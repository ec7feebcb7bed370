"""pFedMe's rule between its own settings, and its server step's range.

pFedMe's inner problem f(theta; D) + (lam / 2) ||theta - w||^2 is solved by K gradient steps of
size personal_lr: its quadratic term scales theta - w by (1 - personal_lr * lam) per step where
the loss is nearly flat, so from personal_lr * lam = 2 on the steps diverge whatever the data
(docs/baselines.md). Such a run used to start and drop every client's update, round after
round.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from baselines_harness import FACTORY, LOCAL, algo, ctx, tiny_data

from pflkit.sdk.algorithms import ALGORITHMS, HyperparameterError
from pflkit.sdk.algorithms.base import check_algorithm
from pflkit.sdk.run_config import ConfigError, SimConfig

PFEDME_RULE = "pfedme: hyperparameter 'personal_lr' must be < 2 / lam = "


@pytest.mark.parametrize(("params", "bound"), [
    ({"personal_lr": 0.2}, "0.133333"),  # lam 15, the default: 3
    ({"lam": 50.0}, "0.04"),  # personal_lr 0.05, the default: 2.5
    ({"lam": 20.0, "personal_lr": 0.1}, "0.1"),  # exactly 2: |1 - 2| = 1 never contracts
    ({"lam": 1e6, "personal_lr": 10.0}, "2e-06"),  # each within its own range
])
def test_pfedme_refuses_a_product_of_personal_lr_and_lam_from_2_on(params: dict,
                                                                   bound: str) -> None:
    with pytest.raises(HyperparameterError) as err:
        check_algorithm("pfedme", params)
    text = str(err.value)
    assert text.startswith(PFEDME_RULE + bound + " (personal_lr * lam < 2"), text
    assert "\n" not in text
    with pytest.raises(HyperparameterError, match="personal_lr \\* lam < 2"):  # in Python alike
        ALGORITHMS["pfedme"].Params(**params)


def test_pfedme_takes_a_product_just_below_2() -> None:
    """Whether 1.995 trains depends on the data's own curvature (docs): it is not refused."""
    assert check_algorithm("pfedme", {"lam": 15.0, "personal_lr": 0.133}).personal_lr == 0.133


@pytest.mark.parametrize("params", [{}, {"personal_lr": 0.1},  # the paper's MNIST setting
                                    {"lam": 1e6, "personal_lr": 1e-6}])
def test_pfedme_takes_products_below_2_and_they_train(params: dict) -> None:
    check_algorithm("pfedme", params)
    data = tiny_data()
    method = algo("pfedme", **params)
    start = method.aggregation.init_global(seed=0)
    result = method.training.fit(start, method.training.init_client(0, 0, data), data, ctx())
    assert math.isfinite(float(result.metrics["train_loss"]))


def test_pfedme_rule_waits_for_the_declarations() -> None:
    """NaN or a negative value gets its declaration's error, not the product's."""
    with pytest.raises(HyperparameterError, match="'lam': input should be a finite number"):
        check_algorithm("pfedme", {"lam": float("nan")})
    bad = ALGORITHMS["pfedme"].Params(personal_lr=-1.0)  # the product rule holds back
    with pytest.raises(HyperparameterError, match=r"'personal_lr' must be in \(0, 10\]"):
        ALGORITHMS["pfedme"](FACTORY, LOCAL, bad)


def test_pfedme_product_is_refused_with_the_config_before_anything_runs(tmp_path: Path) -> None:
    toml = '[algorithm]\nname = "pfedme"\n[algorithm.params]\n'
    assert SimConfig.from_toml(toml + "personal_lr = 0.1\n").algorithm.params["personal_lr"] == 0.1
    with pytest.raises(ConfigError, match=r"^algorithm\.params: " + PFEDME_RULE.replace(
            "(", r"\(").replace("*", r"\*") + "0.133333"):
        SimConfig.from_toml(toml + "personal_lr = 0.2\n")
    from typer.testing import CliRunner

    from pflkit.server.simulator_cli import app

    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "--out", str(out), "--dataset", "digits", "--clients", "4", "--clients-per-round", "2",
        "--model", "twonn", "--algorithm", "pfedme", "--param", "personal_lr=0.2",
        "--rounds", "1", "--epochs", "1", "--quiet"])
    assert result.exit_code == 2 and PFEDME_RULE + "0.133333" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize(("beta", "refused"), [(2.0, False), (10.0, False), (10.5, True),
                                               (1000.0, True)])
def test_pfedme_beta_is_a_server_step_in_0_to_10(beta: float, refused: bool) -> None:
    """beta = 1000 was in range and sent the global model to NaN within one round."""
    if refused:
        with pytest.raises(HyperparameterError,
                           match=r"^pfedme: hyperparameter 'beta' must be in \(0, 10\], got"):
            check_algorithm("pfedme", {"beta": beta})
    else:
        assert check_algorithm("pfedme", {"beta": beta}).beta == beta
