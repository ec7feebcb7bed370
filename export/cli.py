"""``pfl-export``: a client's personalized model as verified ONNX and ExecuTorch files.

Typical commands (every option: docs/export.md):

    pfl-export --run runs/demo --client 17 --lambda 0.3   # W(0.3) baked in
    pfl-export --run RUN --client 3 --lambda runtime      # lam: a model input
    pfl-export --run RUN --head generic                   # the global model
    pfl-export --run RUN --class-counts 5,0,12,0,0,3,0,0,9,1  # FedRoD, new
    pfl-export --state-dir APP --global g.safetensors --config run.toml
    pfl-export --run RUN --client 3 --trainer             # + on-device trainer
    pfl-export classify runs/demo/exports/client17        # run it on images

A run that has not finished (no final.json) is refused unless --round names the checkpoint.
A run's config may import built-in names and installed entry points; a package of your own
(`model = "myapp.nets:Net"`) needs `--allow-imports myapp`: a run folder is data, whoever
sent it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from pflkit.export.contract import ExportError
from pflkit.sdk.console import entry_point
from pflkit.sdk.registry import ImportPolicy, add_project_path

app = typer.Typer(add_completion=False, help=__doc__, no_args_is_help=False,
                  rich_markup_mode="markdown")  # paragraphs reflow, examples stay lines
DEFAULT_GOLDEN_SAMPLES = 5
ALLOW_IMPORTS_HELP = ("a package (or package.module:attr) the {what} may import (repeatable; "
                      "default: built-in names and installed entry points only)")


def _fail(err: Exception) -> typer.Exit:
    typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
    return typer.Exit(2)


@app.callback(invoke_without_command=True)
def main(
    ctx: typer.Context,
    run: Annotated[Path | None, typer.Option(help="pfl-sim run directory")] = None,
    client: Annotated[int | None, typer.Option(
        help="client id in the run, [0, clients - 1] (default: the generic model)")] = None,
    round_done: Annotated[int | None, typer.Option(
        "--round", help="a checkpointed round (default: the last, of a finished run)")] = None,
    state_dir: Annotated[Path | None, typer.Option(help="on-device state folder")] = None,
    global_file: Annotated[Path | None, typer.Option(
        "--global", help="global state file (with --state-dir)")] = None,
    config: Annotated[Path | None, typer.Option(help="run TOML config (with --state-dir)")] = None,
    choice: Annotated[list[str] | None, typer.Option(
        help="NAME=VALUE: a choice the run's method declares (repeatable; see "
             "docs/export.md)")] = None,
    lam: Annotated[str | None, typer.Option(
        "--lambda", help="SuPerFed's lam / APFL's alpha: a number in [0, 1], best or runtime")
                   ] = None,
    head: Annotated[str, typer.Option(help="personalized | generic")] = "personalized",
    class_counts: Annotated[str | None, typer.Option(
        help="alias: counts per class, comma-separated (FedRoD's class_distribution)")] = None,
    proportions: Annotated[str | None, typer.Option(
        help="alias: class proportions, comma-separated (FedRoD's class_distribution)")
                           ] = None,
    fmt: Annotated[list[str] | None, typer.Option(
        "--format", help="onnx and/or executorch (default: both)")] = None,
    int8: Annotated[bool, typer.Option(help="also write int8 (PTQ on the client's train data)")
                    ] = False,
    force_int8: Annotated[bool, typer.Option(help="with --int8: keep it above --max-int8-drop")
                          ] = False,
    max_int8_drop: Annotated[float | None, typer.Option(
        help="with --int8: refuse int8 above this top-1 drop, [0, 100] points (default 1.0)")
                             ] = None,
    golden: Annotated[bool, typer.Option(help="also write golden.json (real test images)")
                      ] = False,
    golden_samples: Annotated[int | None, typer.Option(
        help="with --golden: images in golden.json, [1, 1000] (default 5)")] = None,
    trainer: Annotated[bool, typer.Option(
        help="also write the personal part's training program (docs/on-device.md)")] = False,
    trainer_param: Annotated[list[str] | None, typer.Option(
        help="override an algorithm hyperparameter for the training program, KEY=VALUE")
                             ] = None,
    out: Annotated[Path | None, typer.Option(
        help="output folder (default: RUN/exports/<client|generic>)")] = None,
    force: Annotated[bool, typer.Option(help="replace an existing output folder")] = False,
    allow_imports: Annotated[list[str] | None, typer.Option(
        help=ALLOW_IMPORTS_HELP.format(what="run's config"))] = None,
) -> None:
    """Export, verify in onnxruntime and the ExecuTorch runtime, write model_card.json."""
    add_project_path()  # a run's module:attr model, dataset or algorithm may live here
    if ctx.invoked_subcommand is not None:
        return
    from pflkit.export.golden import MAX_GOLDEN_SAMPLES
    from pflkit.export.pipeline import MAX_INT8_DROP_POINTS, export_model
    from pflkit.export.selection import parse_choice, without_client
    from pflkit.export.source import load_device_source, load_run_source

    logging.basicConfig(level=logging.WARNING)
    try:
        if trainer_param and not trainer:
            raise ExportError("--trainer-param sets the training program's hyperparameters: "
                              "give --trainer too")
        for option, present, switch, on in (  # an option its switch leaves off is never ignored
                ("--golden-samples", golden_samples is not None, "--golden", golden),
                ("--max-int8-drop", max_int8_drop is not None, "--int8", int8),
                ("--force-int8", force_int8, "--int8", int8)):
            if present and not on:
                raise ExportError(f"{option} acts only with {switch}: give {switch} too")
        max_int8_drop = MAX_INT8_DROP_POINTS if max_int8_drop is None else max_int8_drop
        golden_samples = DEFAULT_GOLDEN_SAMPLES if golden_samples is None else golden_samples
        if not 0.0 <= max_int8_drop <= 100.0:
            raise ExportError(f"--max-int8-drop must be in [0, 100] points, got {max_int8_drop:g}")
        if not 1 <= golden_samples <= MAX_GOLDEN_SAMPLES:
            raise ExportError(f"--golden-samples must be in 1..{MAX_GOLDEN_SAMPLES}, got "
                              f"{golden_samples}")
        imports = _imports(allow_imports, "pfl-export --allow-imports")
        if run is not None and state_dir is None:
            source = load_run_source(run, client, round_done, imports)
            if round_done is None:
                _refuse_unfinished(run, source.info["round"], imports)
            default_out = run / "exports" / f"client{client}"  # without --client: see below
        elif state_dir is not None and run is None:
            if global_file is None or config is None:
                raise ExportError("--state-dir needs --global FILE and --config TOML")
            given = [o for o, v in (("--client", client), ("--round", round_done)) if v is not None]
            if given:
                raise ExportError(f"{' and '.join(given)} select(s) a state in a run directory; "
                                  f"with --state-dir the state is the folder's and the round "
                                  f"the --global file's")
            source = load_device_source(state_dir, global_file, config, imports)
            default_out = state_dir / "export"
        else:
            raise ExportError("give --run RUN_DIR, or --state-dir DIR --global FILE "
                              "--config TOML")
        aliases = [(option, text) for option, text in (
            ("--lambda", lam), ("--class-counts", class_counts), ("--proportions", proportions))
                   if text is not None]
        algorithm = source.algorithm
        chosen = without_client(source, parse_choice(
            algorithm.name, algorithm.inference.choices, choice or [], aliases, head))
        if run is not None and client is None:  # RUN/exports/<head>
            default_out = run / "exports" / chosen.head
        result = export_model(source, chosen, out or default_out,
                              fmt or ("onnx", "executorch"), int8=int8, force_int8=force_int8,
                              max_int8_drop_points=max_int8_drop,
                              golden=golden_samples if golden else 0, force=force,
                              trainer=trainer, trainer_params=_key_values(trainer_param or []))
    except (ExportError, OSError, ValueError, KeyError) as err:
        raise _fail(err) from err
    for entry in result.card["parity"]:
        if entry.get("kind") == "training":
            typer.echo(f"{entry['file']:<18} {entry['steps']} SGD steps, personal weights "
                       f"within {entry['max_rel_weight_diff']:.2e} (relative) of eager PyTorch")
            continue
        typer.echo(f"{entry['file']:<18} max|diff| {entry['max_abs_diff']:.2e}  top-1 "
                   f"{entry['test_top1_artifact']:.4f} (eager {entry['test_top1_eager']:.4f}, "
                   f"{entry['test_rows']} rows)")
    if (compared := result.card.get("versus_generic")) is not None:
        exported, generic = compared["exported"], compared["generic"]
        typer.echo(f"new client, class-weighted by its distribution: exported "
                   f"{_share(exported['class_weighted_top1'])}, generic "
                   f"{_share(generic['class_weighted_top1'])} (plain test top-1 "
                   f"{_share(exported['test_top1'])} vs {_share(generic['test_top1'])})")
    typer.echo(f"model card: {result.path('model_card.json')}")


def _share(value: float | None) -> str:
    """A top-1 share as the card has it (null: undefined, e.g. a class without test rows)."""
    return "n/a" if value is None else f"{value:.4f}"


def _imports(allowed: list[str] | None, setting: str) -> ImportPolicy:
    """What a config the user did not write here may import: built-ins, entry points, ``allowed``.

    A run folder or a card may come from anyone, so its import paths are code its writer chose.
    """
    try:
        return ImportPolicy.allowing(allowed or (), setting)
    except ValueError as err:
        raise ExportError(f"--allow-imports: {err}") from err


def _refuse_unfinished(run: Path, rounds_done: int, imports: ImportPolicy) -> None:
    """A run still training (or stopped, or failed) has no final model yet: say so, not export.

    ``final.json`` is the run's last write, after every round and the post-federation stage.
    """
    from pflkit.sdk.config_types import stored_settings
    from pflkit.sdk.run_config import SimConfig
    from pflkit.sdk.rundir import RunDir

    if RunDir(run).final.is_file():
        return
    with stored_settings():  # the run's own config, maybe from an older pflkit
        total = SimConfig.load(RunDir(run).config_file, imports=imports).rounds
    raise ExportError(f"{run} has not finished ({rounds_done} of {total} rounds done, no "
                      f"final.json): export it once pfl-sim ends (pfl-sim --resume {run} "
                      f"continues a stopped run), or give --round {rounds_done} to export "
                      f"that checkpoint as it is")


def _key_values(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` flags as a mapping; values parse as TOML scalars, else stay text."""
    import tomllib

    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise _fail(ExportError(f"--trainer-param expects KEY=VALUE, got {item!r}"))
        try:
            out[key.strip()] = tomllib.loads(f"v = {text.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            out[key.strip()] = text.strip()
    return out


@app.command()
def classify(
    export_dir: Annotated[Path, typer.Argument(help="a pfl-export output folder")],
    count: Annotated[int, typer.Option(
        help="number of test rows, [1, 10000] (at most the export's test split)")] = 8,
    allow_imports: Annotated[list[str] | None, typer.Option(
        help=ALLOW_IMPORTS_HELP.format(what="card's run config"))] = None,
) -> None:
    """Classify real test images with every exported file, beside eager PyTorch."""
    from pflkit.export.classify import NO_IMPORTS, classify_table, read_card
    from pflkit.export.golden import MAX_CLASSIFY_IMAGES

    try:
        if not 1 <= count <= MAX_CLASSIFY_IMAGES:
            raise ExportError(f"--count must be in 1..{MAX_CLASSIFY_IMAGES}, got {count}")
        imports = _imports(allow_imports, NO_IMPORTS.setting)
        typer.echo(classify_table(export_dir, read_card(export_dir), count, imports))
    except (ExportError, OSError, ValueError, KeyError) as err:
        raise _fail(err) from err


script = entry_point(app, "pfl-export")  # the console script: usage errors in one line
