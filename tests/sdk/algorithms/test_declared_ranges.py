"""Every built-in method's hyperparameters: one declaration per setting, one range per setting.

A setting's annotation declares its type and range once (sdk/algorithms/paramcheck.py); the
config, ``pfl-export --trainer-param`` and Params built in Python all meet that declaration,
every refusal is one line naming the method, the setting and its whole range, and the method's
doc states the same range.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from pathlib import Path

import pytest

from pflkit.sdk.algorithms import ALGORITHMS, HyperparameterError, LocalTraining, ModelFactory
from pflkit.sdk.algorithms.base import check_algorithm

DOCS = Path(__file__).parents[3] / "docs"
DOC_OF = {"fedprox": "algorithms", "fedavg_ft": "algorithms", "scaffold": "baselines",
          "pfedme": "baselines", "ditto": "baselines", "apfl": "baselines",
          "fedrep": "baselines", "superfed_mm": "superfed", "superfed_lm": "superfed",
          "fedrod_linear": "fedrod", "fedrod_hyper": "fedrod", "pflmoe": "pflmoe"}
FACTORY = ModelFactory("twonn", (1, 8, 8), 10)


def fields(method: str) -> list[tuple[str, typing.Any]]:
    """(name, resolved annotation) of each hyperparameter of ``method``."""
    params = ALGORITHMS[method].Params
    if not dataclasses.is_dataclass(params):
        return []
    hints = typing.get_type_hints(params, include_extras=True)
    return [(f.name, hints[f.name]) for f in dataclasses.fields(params)]


def kinds(hint: typing.Any) -> set[typing.Any]:
    """The types a setting's value may have (``Annotated`` unwrapped, unions split)."""
    if typing.get_origin(hint) is typing.Annotated:
        return kinds(typing.get_args(hint)[0])
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return set().union(*map(kinds, typing.get_args(hint)))
    return {hint}


NUMBERS = [(m, n, h) for m in sorted(ALGORITHMS) for n, h in fields(m) if {int, float} & kinds(h)]
SETTINGS = [(m, n) for m in sorted(ALGORITHMS) for n, _ in fields(m)]
IDS = [f"{m}.{n}" for m, n, _ in NUMBERS]


def refusal(method: str, name: str, value: object) -> str:
    """The one-line error for ``name = value``."""
    with pytest.raises(HyperparameterError) as err:
        check_algorithm(method, {name: value})
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"{method}: hyperparameter '{name}'"), text
    return text


def declared_range(method: str, name: str, hint: typing.Any) -> str:
    """The range the refusal of a far too large value names, e.g. ``(0, 10]``."""
    huge = 1e300 if float in kinds(hint) else 2**70
    found = re.search(r"must be in (\S+, \S+), got", refusal(method, name, huge))
    assert found, f"{method}.{name}: the refusal names no range"
    return found.group(1)


def test_every_method_with_settings_is_documented() -> None:
    assert {m for m, _ in SETTINGS} == set(DOC_OF)


@pytest.mark.parametrize(("method", "name", "hint"), NUMBERS, ids=IDS)
def test_every_number_declares_its_range(method: str, name: str, hint: typing.Any) -> None:
    """In its annotation, not in a __post_init__ the config, export and Python reach apart."""
    members = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union,
                                                                   types.UnionType) else (hint,)
    assert any(typing.get_origin(m) is typing.Annotated for m in members), \
        f"{method}.{name}: {hint} declares no range"


@pytest.mark.parametrize(("method", "name", "hint"), NUMBERS, ids=IDS)
def test_a_setting_reports_one_range_below_and_above(method: str, name: str,
                                                     hint: typing.Any) -> None:
    """ft_epochs once said '>= 0' below and '[-10000, 10000]' above: two ranges for one key."""
    shown = declared_range(method, name, hint)
    below = -1e300 if float in kinds(hint) else -(2**70)
    assert f"must be in {shown}, got" in refusal(method, name, below)
    assert f"must be in {shown}, got" in refusal(method, name, -1)  # every range starts >= 0


@pytest.mark.parametrize(("method", "name", "hint"), NUMBERS, ids=IDS)
def test_the_docs_state_the_codes_range(method: str, name: str, hint: typing.Any) -> None:
    shown = declared_range(method, name, hint).replace("e+0", "e")  # 1e+06 is written 1e6
    doc = (DOCS / f"{DOC_OF[method]}.md").read_text()
    rows = [line for line in doc.splitlines() if f"`{name}`" in line or
            line.lstrip("# ").startswith(f"{name} =")]  # a TOML key, or one commented out
    assert any(shown in row for row in rows), f"{DOC_OF[method]}.md states no {shown} for {name}"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), "1", True, [1]])
@pytest.mark.parametrize(("method", "name", "hint"), NUMBERS, ids=IDS)
def test_nan_infinity_text_bools_and_lists_are_refused(method: str, name: str,
                                                       hint: typing.Any, value: object) -> None:
    assert repr(value) in refusal(method, name, value)


@pytest.mark.parametrize(("method", "name"), SETTINGS, ids=[f"{m}.{n}" for m, n in SETTINGS])
def test_another_methods_setting_is_unknown(method: str, name: str) -> None:
    """A setting goes to its own method: the others refuse it by name (or take none at all)."""
    for other in sorted(ALGORITHMS):
        if name not in dict(fields(other)):
            with pytest.raises(HyperparameterError, match=rf"{other}: (unknown hyperparameter "
                                                          rf"'{name}'|takes no hyperparameters)"):
                check_algorithm(other, {name: 1})


@pytest.mark.parametrize("method", ["fedavg_ft", "fedrod_linear", "fedrod_hyper", "superfed_mm",
                                    "superfed_lm"])
def test_a_negative_learning_rate_is_refused_before_training(method: str) -> None:
    """ft_lr = -1 passed the config and reached torch.optim.SGD after the last round."""
    assert refusal(method, "ft_lr", -1).endswith("'ft_lr' must be in (0, 10], got -1.0")


@pytest.mark.parametrize(("method", "name", "hint"), NUMBERS, ids=IDS)
def test_params_built_in_python_meet_the_same_declaration(method: str, name: str,
                                                          hint: typing.Any) -> None:
    """A Params made in code skips the config's parsing; the method refuses it all the same.

    With a stage to act in (``ft_epochs``): an ``ft_*`` setting given with none is refused apart.
    """
    cls = ALGORITHMS[method]
    stage = {"ft_epochs": 1} if "ft_epochs" in dict(fields(method)) and name != "ft_epochs" else {}
    bad = cls.Params(**{name: -1.0 if float in kinds(hint) else -(2**70)}, **stage)
    with pytest.raises(HyperparameterError, match=rf"^{method}: hyperparameter '{name}' must be"):
        cls(FACTORY, LocalTraining(epochs=1), bad)


@pytest.mark.parametrize(("method", "param", "message"), [
    ("fedavg_ft", "ft_lr=-1", "fedavg_ft: hyperparameter 'ft_lr' must be in (0, 10], got -1.0"),
    ("pflmoe", "momentum=-0.5", "pflmoe: hyperparameter 'momentum' must be in [0, 1), got -0.5"),
])
def test_pfl_sim_refuses_before_writing_anything(tmp_path: Path, method: str, param: str,
                                                 message: str) -> None:
    """ft_lr = -1 used to fail after round 1, leaving checkpoints behind in --out."""
    from typer.testing import CliRunner

    from pflkit.server.simulator_cli import app

    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "--out", str(out), "--dataset", "digits", "--clients", "4", "--clients-per-round", "2",
        "--model", "twonn", "--algorithm", method, "--param", param, "--rounds", "1",
        "--epochs", "1", "--quiet"])
    assert result.exit_code == 2 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize(("method", "given"), [
    ("fedavg_ft", {"ft_epochs": 0, "ft_lr": 0.1}),
    ("superfed_mm", {"ft_lr": 0.1}),
    ("superfed_lm", {"ft_lambda": 0.5}),
    ("fedrod_linear", {"ft_lr": 0.1}),
    ("fedrod_hyper", {"ft_scope": "personal_head"}),
])
def test_a_post_federation_setting_given_without_its_epochs_is_refused(method: str,
                                                                       given: dict) -> None:
    """ft_lr, ft_lambda or ft_scope with ft_epochs = 0 cannot act: it was silently ignored."""
    name = next(k for k in given if k != "ft_epochs")
    with pytest.raises(HyperparameterError) as err:
        check_algorithm(method, given)
    text = str(err.value)
    assert "\n" not in text and f"'{name}' must be unset while ft_epochs = 0" in text, text
    assert text.startswith(f"{method}: "), text  # the registered name, not the Params' family
    with pytest.raises(HyperparameterError, match=f"'{name}'"):  # built in Python alike
        ALGORITHMS[method].Params(**given)
    check_algorithm(method, {**given, "ft_epochs": 2})  # with a stage to act in
    check_algorithm(method, {"ft_epochs": 0})  # the defaults: nothing given, nothing refused


def test_a_rule_against_training_is_checked_with_the_config():
    """FedRep's body_epochs <= E was checked only when the method was built, after the data
    was loaded, and without the config's key."""
    from pflkit.sdk.run_config import ConfigError, SimConfig
    toml = '[algorithm]\nname = "fedrep"\n[algorithm.params]\nbody_epochs = 2\n[training]\n'
    assert SimConfig.from_toml(toml + "epochs = 2\n").training.epochs == 2
    with pytest.raises(ConfigError, match=r"^algorithm\.params: fedrep: hyperparameter "
                                          r"'body_epochs' must be <= the local epochs E \(1\)"):
        SimConfig.from_toml(toml + "epochs = 1\n")
    with pytest.raises(HyperparameterError, match="body_epochs"):  # built in Python alike
        ALGORITHMS["fedrep"](ModelFactory("twonn", (1, 8, 8), 10), LocalTraining(epochs=1),
                             ALGORITHMS["fedrep"].Params(body_epochs=2))
