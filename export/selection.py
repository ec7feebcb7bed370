"""From the user's choice to an :class:`Exportable`, without knowing any algorithm.

The command line's text becomes a :class:`~pflkit.sdk.algorithms.inference.Choice`
(:func:`parse_choice`) read through the method's declaration (its inference role's
``choices``): each
``--choice NAME=VALUE`` names a declared choice, and an alias such as ``--lambda`` sets the
choice that declares it. The algorithm resolves the choice
(its inference role's ``inference_model``: the module, its outputs, an
optional runtime input, the card's mixture) and checks it: its errors name the method.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pflkit.export.contract import Exportable, ExportError, TensorSpec
from pflkit.export.source import Source
from pflkit.sdk.algorithms.inference import (
    DISTRIBUTION,
    RUNTIME,
    Choice,
    ChoiceSpec,
    RuntimeInput,
)


def _declared(method: str, specs: Sequence[ChoiceSpec]) -> str:
    return f"{method}'s choices: " + (", ".join(s.name for s in specs) or "none")


def parse_choice(method: str, specs: Sequence[ChoiceSpec], pairs: Sequence[str] = (),
                 aliases: Sequence[tuple[str, str]] = (), head: str = "personalized"
                 ) -> Choice:
    """``--choice NAME=VALUE`` texts and ``(alias option, text)`` pairs -> a checked choice.

    A name or alias the method does not declare, a value it refuses, or one choice set twice
    is an :class:`ExportError` naming the declared choices.
    """
    declared = {s.name: s for s in specs}
    texts: dict[str, tuple[str, str, str]] = {}  # name -> (text, form, the option that gave it)
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip():
            raise ExportError(f"--choice expects NAME=VALUE, got {pair!r}")
        if name.strip() not in declared:
            raise ExportError(f"--choice {name.strip()}: {method} declares no such choice "
                              f"({_declared(method, specs)})")
        texts.setdefault(name.strip(), (text, "", f"--choice {name.strip()}"))
    for option, text in aliases:
        found = [(s, form) for s in specs for alias, form in s.aliases if alias == option]
        if not found:
            raise ExportError(f"{option}: {method} declares no choice it sets "
                              f"({_declared(method, specs)})")
        spec, form = found[0]
        if spec.name in texts:
            raise ExportError(f"{option} and {texts[spec.name][2]} both set {spec.name}: "
                              f"give one")
        texts[spec.name] = (text, form, option)
    if len(pairs) != len({p.partition("=")[0].strip() for p in pairs}):
        raise ExportError("a --choice is given twice")
    values = {}
    for name, (text, form, option) in texts.items():
        try:
            values[name] = declared[name].parse(text, form)
        except ValueError as err:  # the distribution parser names its option already
            raise ExportError(str(err) if option in str(err) else f"{option}: {err}") from err
    try:
        return Choice(values, head)
    except ValueError as err:
        raise ExportError(str(err)) from err


def for_new_client(specs: Sequence[ChoiceSpec], choice: Choice) -> bool:
    """Whether ``choice`` describes a client known only by it (its state is not used)."""
    return any(s.new_client and s.name in choice.values for s in specs)


def without_client(source: Source, choice: Choice) -> Choice:
    """A run exported without ``--client`` gives the generic model (docs/export.md).

    There is no client state to personalize, so only a new client's choice (e.g. FedRoD's
    class distribution) still builds a personalized model; another choice needs a client.
    """
    specs = source.algorithm.inference.choices
    if "run" in source.info and source.info.get("client") is not None \
            and for_new_client(specs, choice):  # else a card would claim client N's model
        names = sorted(s.name for s in specs if s.new_client and s.name in choice.values)
        raise ExportError(f"{', '.join(names)} builds a new client's model from its own "
                          "choice, not client N's: give --client N or the distribution, not "
                          "both")
    if ("run" not in source.info or source.info.get("client") is not None
            or choice.head != "personalized" or for_new_client(specs, choice)):
        return choice
    if choice.values:
        raise ExportError(f"{', '.join(sorted(choice.values))} chooses a client's personalized "
                          f"model: give --client N (without it the export is the generic model)")
    return Choice({}, "generic")


def build_exportable(source: Source, choice: Choice
                     ) -> tuple[Exportable, dict[str, Any] | None]:
    """The module to export for ``choice`` and the card's ``mixture`` (None: plain model)."""
    _check_distribution_lengths(source.algorithm.inference.choices, choice,
                                source.spec.num_classes, source.spec.name)
    try:
        built = source.algorithm.inference.inference_model(source.global_state,
                                                           source.client_state, choice)
    except (ValueError, KeyError, RuntimeError) as err:  # RuntimeError: torch on bad tensors
        files = " and ".join(source.files[k] for k in ("global", "client") if k in source.files)
        text = " ".join(str(err).split())  # torch's messages span lines
        raise ExportError(f"cannot build the model{f' from {files}' if files else ''}: "
                          f"{text}") from err
    mixture = None if built.mixture is None else built.mixture.to_card()
    _check_runtime_input(source.algorithm.name, source.algorithm.inference.choices,
                         built.runtime_input, mixture)
    spec = source.spec
    layout = str(spec.preprocessing.to_dict()["layout"])  # NCHW images, NF rows, NTF sequences
    inputs = [TensorSpec("image" if layout == "NCHW" else "input", ("batch", *spec.input_shape),
                         {"layout": layout})]
    runtime = built.runtime_input
    if runtime is not None:  # the graph clamps it into its range and reads NaN as "nan"
        inputs.append(TensorSpec(runtime.name, (1,), runtime.to_card()))
    outputs = [TensorSpec(name, ("batch", spec.num_classes), {"meaning": "logits"})
               for name in built.outputs]
    exportable = Exportable(built.module.eval(), inputs, outputs, runtime, built.quantizable)
    return exportable, mixture


def _check_distribution_lengths(specs: Sequence[ChoiceSpec], choice: Choice, num_classes: int,
                                dataset: str) -> None:
    """A distribution choice has one entry per class of the run's dataset.

    Checked here, where the class count is known, so that the error names the user's options
    rather than blaming the checkpoint the model is built from.
    """
    for spec in specs:
        value = choice.get(spec.name)
        if spec.kind == DISTRIBUTION and value is not None and len(value) != num_classes:
            options = ", ".join([f"--choice {spec.name}", *(a for a, _ in spec.aliases)])
            raise ExportError(f"{spec.name} ({options}) must have {num_classes} entries, one "
                              f"per class of {dataset}, got {len(value)}")


def _check_runtime_input(method: str, specs: Sequence[ChoiceSpec], runtime: RuntimeInput | None,
                         mixture: dict[str, Any] | None) -> None:
    """A runtime input is a declared runtime choice, and the card's choice names it "runtime".

    Card readers find the input through ``mixture.choice`` (docs/model-card.md; the Android
    core refuses a card where the two do not name each other), so export refuses to write one.
    """
    marked = sorted(k for k, v in ((mixture or {}).get("choice") or {}).items() if v == RUNTIME)
    if runtime is None:
        problem = f"its card marks {marked[0]!r} \"runtime\" but the model has no such input" \
            if marked else ""
    elif not any(s.name == runtime.name and s.runtime for s in specs):
        problem = (f"its runtime input {runtime.name!r} is not a choice it declares with "
                   f"runtime=True ({_declared(method, specs)})")
    else:
        problem = "" if marked == [runtime.name] else (
            f"its model takes the input {runtime.name!r}, so its card's mixture.choice must mark "
            f"{runtime.name!r} (and nothing else) \"runtime\", not {marked or 'nothing'}")
    if problem:
        raise ExportError(f"cannot build the model: {method}: {problem}")
