"""The rules of a model card's ``training`` section: one reading for Python and the phone.

An export folder comes from outside the process, so its ``training`` section is checked as a
whole before anything loads: every field the trainers read, its JSON type, its documented
range (docs/model-card.md) and the references between fields (an optimizer's parameters, a
phase's optimizer and rows, the inputs a program takes). These are the rules of the Android
core's ``TrainingSection`` with its messages (``training.<field>: <problem>``), so a card either
trainer refuses the other refuses too: the cases of
``android-demo/core/src/test/resources/fixtures/trainer/refusals.json`` run against both.
"""

from __future__ import annotations

import math
from typing import Any

SCHEMA = "pflkit.training/1"
TRAIN_ROWS = "train"  # the rows no split took (sdk.algorithms.recipe.TRAIN_ROWS)
SOURCES = ("image", "prepare", "label", "lambda")  # where a program input comes from
OPTIMIZER_NUMBERS = ("lr", "momentum", "weight_decay", "dampening")
MAX_INT = 2**31 - 1  # a Java int: the phone's counts
MAX_LAMBDA_SIZE = 1_000_000


class TrainingProgramError(ValueError):
    """A training program and its description do not fit together (names, shapes, optimizers)."""


def check_section(section: Any) -> None:
    """Refuse a ``training`` section the trainers cannot run, naming the field, in one line."""
    t = _object(section, "training")
    if (version := _string(_required(t, "schema_version", "training"),
                           "training.schema_version")) != SCHEMA:
        raise _fail("training.schema_version", f"unsupported version {version!r} (this trainer "
                    f"reads {SCHEMA})")
    for key in ("program", "initial_weights"):
        _file_name(t, key)
    _string(_required(t, "train_method", "training"), "training.train_method")
    if t.get("prepare_method") is not None:
        _string(t["prepare_method"], "training.prepare_method")
    inputs = [_input(v, f"training.inputs[{i}]") for i, v in enumerate(_list(t, "inputs"))]
    params = [_parameter(v, f"training.parameters[{i}]")
              for i, v in enumerate(_list(t, "parameters"))]
    max_batch = _positive(t, "max_batch", "training")
    _string(_required(t, "loss", "training"), "training.loss")
    optimizers = [_optimizer(v, f"training.optimizers[{i}]")
                  for i, v in enumerate(_list(t, "optimizers"))]
    schedule = _object(_required(t, "schedule", "training"), "training.schedule")
    _positive(schedule, "epochs", "training.schedule")
    batch = _positive(schedule, "batch_size", "training.schedule")
    if batch > max_batch:  # the train method takes batches of 1..max_batch rows only
        raise _fail("training.schedule.batch_size", f"must be at most max_batch ({max_batch}), "
                    f"found {batch}")
    phases = [_phase(v, f"training.schedule.phases[{i}]")
              for i, v in enumerate(_list(schedule, "phases", "training.schedule"))]
    splits = [] if t.get("splits") is None else [
        _split(v, f"training.splits[{i}]") for i, v in enumerate(_list(t, "splits"))]
    lam_size = None if t.get("lambda") is None else _lambda(t["lambda"], "training.lambda")
    choose = t.get("choose_lambda_on")
    if choose is not None:
        _string(choose, "training.choose_lambda_on")
    if t.get("lambda_grid") is not None:
        grid = _numbers(t["lambda_grid"], "training.lambda_grid")
        if not grid:
            raise _fail("training.lambda_grid", "expected at least one lambda")
        _in_unit("training.lambda_grid", grid)
    _dims(_required(t, "image_shape", "training"), "training.image_shape", batched=False)
    _classes(t)
    _check_references(t, inputs, params, optimizers, phases, splits, lam_size, choose)


def _check_references(t: dict[str, Any], inputs: list[tuple[str, list[int]]],
                      params: list[str], optimizers: list[tuple[str, list[str]]],
                      phases: list[tuple[str, str]], splits: list[str], lam_size: int | None,
                      choose: str | None) -> None:
    """What one field names exists in another (the Java reader's ``checkConsistency``)."""
    has_lambda = lam_size is not None
    if len(set(params)) != len(params):
        raise _fail("training.parameters", "duplicate parameter names")
    for i, (_name, names) in enumerate(optimizers):
        for name in names:
            if name not in params:
                raise _fail(f"training.optimizers[{i}].parameters", f"{name!r} is not one of "
                            "training.parameters")
    rows = {TRAIN_ROWS, *splits}
    for i, (optimizer, row_set) in enumerate(phases):
        if optimizer not in {name for name, _ in optimizers}:
            raise _fail(f"training.schedule.phases[{i}].optimizer", f"no optimizer named "
                        f"{optimizer!r}")
        if row_set not in rows:
            raise _fail(f"training.schedule.phases[{i}].rows", f"no row set named {row_set!r}")
    if choose is not None and (not has_lambda or choose not in rows):
        raise _fail("training.choose_lambda_on", f"needs a lambda input and a split named "
                    f"{choose!r}")
    sources = [source for source, _ in inputs]
    if "prepare" in sources and t.get("prepare_method") is None:
        raise _fail("training.inputs", "an input comes from prepare, but there is no "
                    "prepare_method")
    if sources.count("label") != 1 or sources.count("lambda") != int(has_lambda):
        raise _fail("training.inputs", "expected one label input and a lambda input exactly "
                    "when training.lambda is set")
    if has_lambda and inputs[sources.index("lambda")][1] != [lam_size]:
        raise _fail("training.inputs", f"the lambda input's shape must be [{lam_size}] "
                    "(training.lambda.size)")


def _input(node: Any, path: str) -> tuple[str, list[int]]:
    """One program input: where it comes from and its dimensions (after ``batch``)."""
    m = _object(node, path)
    _string(_required(m, "name", path), f"{path}.name")
    source = _one_of(_required(m, "from", path), f"{path}.from", SOURCES)
    dims = _dims(_required(m, "shape", path), f"{path}.shape", batched=source != "lambda")
    _one_of(_required(m, "dtype", path), f"{path}.dtype",
            ("int64",) if source == "label" else ("float32",))
    return source, dims


def _parameter(node: Any, path: str) -> str:
    m = _object(node, path)
    name = _string(_required(m, "name", path), f"{path}.name")
    _dims(_required(m, "shape", path), f"{path}.shape", batched=False)
    _one_of(_required(m, "dtype", path), f"{path}.dtype", ("float32",))
    return name


def _optimizer(node: Any, path: str) -> tuple[str, list[str]]:
    """SGD over named parameters (ExecuTorch's training runtime offers SGD only)."""
    m = _object(node, path)
    name = _string(_required(m, "name", path), f"{path}.name")
    names = _array(_required(m, "parameters", path), f"{path}.parameters")
    params = [_string(v, f"{path}.parameters[{i}]") for i, v in enumerate(names)]
    for key in OPTIMIZER_NUMBERS:
        value = _number(_required(m, key, path), f"{path}.{key}")
        if not math.isfinite(value) or value < 0:
            raise _fail(f"{path}.{key}", f"must be a finite number >= 0, found {value!r}")
    if not isinstance(_required(m, "nesterov", path), bool):
        raise _fail(f"{path}.nesterov", f"expected true or false, found {m['nesterov']!r}")
    if m.get("kind") is not None:
        _one_of(m["kind"], f"{path}.kind", ("sgd",))
    return name, params


def _phase(node: Any, path: str) -> tuple[str, str]:
    m = _object(node, path)
    return (_string(_required(m, "optimizer", path), f"{path}.optimizer"),
            _string(_required(m, "rows", path), f"{path}.rows"))


def _split(node: Any, path: str) -> str:
    m = _object(node, path)
    name = _string(_required(m, "name", path), f"{path}.name")
    if name == TRAIN_ROWS:
        raise _fail(f"{path}.name", f"{TRAIN_ROWS!r} names the rows no split took")
    fraction = _number(_required(m, "fraction", path), f"{path}.fraction")
    if not 0 <= fraction < 1:
        raise _fail(f"{path}.fraction", f"must be in [0, 1), found {fraction!r}")
    _one_of(_required(m, "if_empty", path), f"{path}.if_empty", ("all", "skip"))
    return name


def _lambda(node: Any, path: str) -> int:
    """SuPerFed's ``lam`` input: its size, a fixed value or which layer each entry draws."""
    m = _object(node, path)
    size = _integer(_required(m, "size", path), f"{path}.size")
    if not 1 <= size <= MAX_LAMBDA_SIZE:
        raise _fail(f"{path}.size", f"must be a positive integer, found {size}")
    if m.get("fixed") is not None:
        _in_unit(f"{path}.fixed", [_number(m["fixed"], f"{path}.fixed")], single=True)
    if m.get("layer_of") is not None:
        layers = _numbers(m["layer_of"], f"{path}.layer_of")
        if len(layers) != size:
            raise _fail(f"{path}.layer_of", f"expected {size} entries, found {len(layers)}")
        for i, layer in enumerate(layers):
            if layer < 0 or layer != int(layer) or layer >= size:
                raise _fail(f"{path}.layer_of[{i}]", f"expected a layer index in 0..{size - 1}")
    return size


def _classes(t: dict[str, Any]) -> None:
    """The program's outputs (loss, logits): the logits' class count is what labels may be.

    Read by the Python trainer and the phone's ``RecipeRunner``, which refuse other labels.
    """
    outputs = _array(_required(t, "outputs", "training"), "training.outputs")
    if len(outputs) != 2:
        raise _fail("training.outputs", f"expected the loss and the logits, found {len(outputs)} "
                    "outputs")
    shape = _object(outputs[1], "training.outputs[1]").get("shape")
    if not isinstance(shape, list) or len(shape) != 2 or shape[0] != "batch":
        raise _fail("training.outputs[1].shape", f"expected [\"batch\", classes], found {shape!r}")
    if not 1 <= _integer(shape[1], "training.outputs[1].shape[1]") <= MAX_INT:
        raise _fail("training.outputs[1].shape[1]", "must be a positive integer")


def _file_name(t: dict[str, Any], key: str) -> None:
    name = _string(_required(t, key, "training"), f"training.{key}")
    if "/" in name or "\\" in name or name.startswith("."):
        raise _fail(f"training.{key}", f"must be a plain file name beside the card, found "
                    f"{name!r}")


def _dims(node: Any, path: str, batched: bool) -> list[int]:
    dims = _array(node, path)
    if batched:
        if not dims or dims[0] != "batch":
            raise _fail(path, f"expected [\"batch\", ...], found {dims!r}")
        dims = dims[1:]
    out = [_integer(dim, f"{path}[{i}]") for i, dim in enumerate(dims, start=int(batched))]
    for i, dim in enumerate(out, start=int(batched)):
        if dim < 0:
            raise _fail(f"{path}[{i}]", "must be >= 0")
    return out


def _in_unit(path: str, values: list[float], single: bool = False) -> None:
    for i, value in enumerate(values):
        if not 0 <= value <= 1:
            raise _fail(path if single else f"{path}[{i}]", f"must be in [0, 1], found {value!r}")


def _positive(m: dict[str, Any], key: str, parent: str) -> int:
    value = _integer(_required(m, key, parent), f"{parent}.{key}")
    if not 1 <= value <= MAX_INT:
        raise _fail(f"{parent}.{key}", f"must be a positive integer, found {value}")
    return value


def _list(m: dict[str, Any], key: str, parent: str = "training") -> list[Any]:
    return _array(_required(m, key, parent), f"{parent}.{key}")


# -- JSON types, as the Java core's Fields reads them (a JSON number is one type) ---------------
def _fail(path: str, problem: str) -> TrainingProgramError:
    return TrainingProgramError(f"{path}: {problem}")


def _required(m: dict[str, Any], key: str, path: str) -> Any:
    if m.get(key) is None:
        raise _fail(f"{path}.{key}", "required field is missing")
    return m[key]


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, f"expected an object, found {_describe(value)}")
    return value


def _array(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(path, f"expected an array, found {_describe(value)}")
    return value


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(path, f"expected a non-empty string, found {_describe(value)}")
    return value


def _one_of(value: Any, path: str, allowed: tuple[str, ...]) -> str:
    if _string(value, path) not in allowed:
        raise _fail(path, f"expected one of {', '.join(allowed)}, found {value!r}")
    return value


def _number(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(path, f"expected a number, found {_describe(value)}")
    return float(value)


def _numbers(value: Any, path: str) -> list[float]:
    return [_number(v, f"{path}[{i}]") for i, v in enumerate(_array(value, path))]


def _integer(value: Any, path: str) -> int:
    number = _number(value, path)
    if not math.isfinite(number) or number != int(number) or abs(number) > 2**53:
        raise _fail(path, f"expected an integer, found {_describe(value)}")
    return int(number)


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{type(value).__name__} ({len(text)} characters)"
