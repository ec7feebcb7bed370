"""``pfl-sim``: run a federated simulation from a TOML config, flags and ``--set`` overrides.

Typical commands:

    pfl-sim --config docs/configs/demo.toml --out runs/demo
    pfl-sim --config run.toml --out runs/lr --set training.lr=0.05
    pfl-sim --resume runs/demo       # continue a stopped run
    pfl-sim init my-project          # a runnable starter project

Flags override the file; every key and its range: docs/simulator.md. The whole configuration
is validated before anything is written: an error is one line naming the key and its allowed
range, exit status 2.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from pflkit.sdk.config_toml import apply_overrides, parse_value, read_toml, set_key
from pflkit.sdk.config_types import shown
from pflkit.sdk.console import entry_point
from pflkit.sdk.registry import ExtensionError, add_project_path
from pflkit.sdk.run_config import ConfigError, ExecutionConfig, SimConfig
from pflkit.sdk.rundir import RunDir

app = typer.Typer(add_completion=False, help=__doc__, invoke_without_command=True,
                  no_args_is_help=True, rich_markup_mode="markdown")  # paragraphs reflow


def _fail(err: Exception) -> typer.Exit:
    if isinstance(err, OSError) and err.filename and err.strerror:  # not "[Errno 2] ..."
        err = OSError(f"{err.filename}: {err.strerror}")
    typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
    return typer.Exit(2)


def _stopped(run_dir: Path | None) -> typer.Exit:
    """Ctrl-C: the committed rounds stay (docs/simulator.md), so say how to go on; exit 130."""
    files = RunDir(run_dir) if run_dir is not None else None
    if files is not None and files.config_file.is_file():  # the run got far enough to resume
        done = files.rounds_done()
        typer.echo(f"pfl-sim: stopped by Ctrl-C with {done} round{'' if done == 1 else 's'} "
                   f"committed; continue with: pfl-sim --resume {run_dir}", err=True)
    return typer.Exit(130)


def build_config(path: Path | None, flags: dict[str, Any], params: list[str],
                 overrides: list[str]) -> SimConfig:
    """File, then the named flags, then ``--param`` and ``--set`` (later wins); validated once."""
    raw = read_toml(path) if path else {}
    for dotted, value in flags.items():
        if value is not None:
            set_key(raw, dotted, value)
    if flags.get("training.fraction") is not None:  # --fraction replaces the file's count
        if flags.get("training.clients_per_round") is not None:
            raise ConfigError("give --clients-per-round or --fraction, not both")
        raw["training"].pop("clients_per_round", None)
    elif flags.get("training.clients_per_round") is not None:  # and the count a file's share
        raw["training"].pop("fraction", None)
    for item in params:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--param expects KEY=VALUE (e.g. mu=0.01), got {shown(item)}")
        set_key(raw, f"algorithm.params.{key.strip()}",
                parse_value(value.strip(), f"--param {shown(key.strip())}"))
    raw = apply_overrides(raw, overrides)
    if not any(key != "execution" for key in raw):  # [execution] says where, not what
        what = f"{path}: sets nothing about the run" if path else \
            "give --config FILE or flags that describe the run"
        raise ConfigError(f"{what} (an empty run config would start a {SimConfig.rounds}-round "
                          "run of the defaults)")
    return SimConfig.from_mapping(raw)


def _config_keys(flags: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """``{"--flag": (config key, value)}`` -> ``{config key: value}``, as build_config takes."""
    return dict(flags.values())


def _resumed_execution(run_dir: Path, flags: dict[str, tuple[str, Any]], overrides: list[str],
                       changes: list[str]) -> ExecutionConfig:
    """A resumed run keeps its config; only where it runs ([execution]) may change.

    ``changes``: the other options given (``--rounds``, ``--config``, ...), each refused by the
    name the user typed rather than silently ignored.
    """
    other = changes + [f"--set {o}" for o in overrides if not o.strip().startswith("execution.")]
    if other:
        raise ConfigError(f"--resume continues the run as configured, so {other[0]} cannot be "
                          f"given (only {', '.join(flags)} and --set execution.KEY=VALUE can "
                          "change; another --out starts a new run)")
    raw = RunDir(run_dir).config().to_mapping()
    for dotted, value in _config_keys(flags).items():
        if value is not None:
            set_key(raw, dotted, value)
    return SimConfig.from_mapping(apply_overrides(raw, overrides)).execution


@app.callback()
def main(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Option(
        help="TOML run configuration (keys and ranges: docs/simulator.md)")] = None,
    out: Annotated[Path | None, typer.Option(
        help="run directory to create (a new or empty folder)")] = None,
    resume: Annotated[Path | None, typer.Option(
        help="continue this stopped run directory; only --executor, --device, --precision, "
             "--ray-address, --personalize-on and --set execution.* may change")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="override any config key: KEY=VALUE, VALUE parsed as TOML "
                      "(e.g. training.lr=0.05); repeatable")] = None,
    dataset: Annotated[str | None, typer.Option(
        help="fmnist | digits | mnist | emnist | cifar10 | cifar100 | synthetic | folder | "
             "module:attr (docs/data.md)")] = None,
    data_root: Annotated[str | None, typer.Option(
        help="folder with the dataset files (docs/data.md)")] = None,
    resize: Annotated[int | None, typer.Option(
        help="resize images to N x N, N in [1, 512]")] = None,
    partition: Annotated[str | None, typer.Option(
        help="iid | shards | dirichlet | natural")] = None,
    clients: Annotated[int | None, typer.Option(help="number of clients, [1, 100000]")] = None,
    alpha: Annotated[float | None, typer.Option(
        help="Dirichlet concentration, (0, 1e6]")] = None,
    test_fraction: Annotated[float | None, typer.Option(
        help="share of each client's rows kept as its own test split, [0, 1)")] = None,
    model: Annotated[str | None, typer.Option(
        help="twonn | twocnn | lenet5 | fedrod_convnet | mobilenet | module:attr")] = None,
    algorithm: Annotated[str | None, typer.Option(
        help="fedavg | fedprox | superfed_mm | ... | module:attr (docs/algorithms.md)")] = None,
    param: Annotated[list[str] | None, typer.Option(
        help="algorithm hyperparameter KEY=VALUE (its range: the method's doc); repeatable")
                     ] = None,
    rounds: Annotated[int | None, typer.Option(help="federated rounds, [1, 100000]")] = None,
    clients_per_round: Annotated[int | None, typer.Option(
        help="clients sampled per round, [1, --clients] (instead of --fraction)")] = None,
    fraction: Annotated[float | None, typer.Option(
        help="share of clients sampled per round, [0, 1]")] = None,
    epochs: Annotated[int | None, typer.Option(help="local epochs E, [0, 1000]")] = None,
    batch_size: Annotated[int | None, typer.Option(help="batch size B, [1, 65536]")] = None,
    lr: Annotated[float | None, typer.Option(help="round-0 learning rate, (0, 10]")] = None,
    seed: Annotated[int | None, typer.Option(help="seed of everything, [0, 4294967295]")
                    ] = None,
    eval_interval: Annotated[int | None, typer.Option(
        help="evaluate every N rounds (and after the last), [1, 100000]")] = None,
    executor: Annotated[str | None, typer.Option(
        help="who runs the client fits: sequential | batched | ray")] = None,
    device: Annotated[str | None, typer.Option(
        help="auto | cpu | cuda | cuda:N, N in [0, 9999]")] = None,
    precision: Annotated[str | None, typer.Option(help="fp32 | bf16 (training autocast)")
                         ] = None,
    ray_address: Annotated[str | None, typer.Option(
        help="join this Ray cluster (with --executor ray)")] = None,
    personalize_on: Annotated[str | None, typer.Option(
        help="post-federation stage engine: eager | executorch (docs/on-device.md)")] = None,
    quiet: Annotated[bool, typer.Option(help="no progress bars or warnings; errors only")
                     ] = False,
) -> None:
    """Run (or resume) a simulation and write its run directory and report."""
    if ctx.invoked_subcommand is not None:
        return
    from pflkit.server.simulator import Simulation

    logging.basicConfig(level=logging.ERROR if quiet else logging.WARNING)
    add_project_path()
    execution_flags = {  # --flag: (config key, value)
        "--executor": ("execution.executor", executor), "--device": ("execution.device", device),
        "--precision": ("execution.precision", precision),
        "--ray-address": ("execution.ray_address", ray_address),
        "--personalize-on": ("execution.personalize_on", personalize_on)}
    run_flags = {
        "--dataset": ("data.dataset", dataset), "--data-root": ("data.root", data_root),
        "--resize": ("data.resize", resize), "--partition": ("data.kind", partition),
        "--clients": ("data.num_clients", clients), "--alpha": ("data.alpha", alpha),
        "--test-fraction": ("data.test_fraction", test_fraction),
        "--model": ("model.name", model), "--algorithm": ("algorithm.name", algorithm),
        "--rounds": ("rounds", rounds),
        "--clients-per-round": ("training.clients_per_round", clients_per_round),
        "--fraction": ("training.fraction", fraction), "--epochs": ("training.epochs", epochs),
        "--batch-size": ("training.batch_size", batch_size), "--lr": ("training.lr", lr),
        "--seed": ("seed", seed), "--eval-interval": ("eval_interval", eval_interval),
    }
    try:
        if resume is not None:
            changes = [flag for flag, (_, value) in run_flags.items() if value is not None]
            changes += [name for name, given in (("--param", param), ("--config", config),
                                                 ("--out", out)) if given]
            sim = Simulation.resume(resume, progress=not quiet,
                                    execution=_resumed_execution(resume, execution_flags,
                                                                 set_ or [], changes))
        else:
            if out is None:
                raise ConfigError("give --out RUN_DIR (or --resume RUN_DIR)")
            if config is not None:
                add_project_path(config.parent)
            sim = Simulation(build_config(config, _config_keys(run_flags | execution_flags),
                                          param or [], set_ or []), out, progress=not quiet)
        result = sim.run()
    except (ConfigError, ExtensionError, ValueError, OSError, KeyError) as err:
        raise _fail(err) from err
    except KeyboardInterrupt:
        raise _stopped(resume or out) from None
    summary = result.final.get("clients", {}).get("summary", {})
    typer.echo(f"global model top-1 on the global test set: "
               f"{result.final['global_model']['top1']:.4f}")
    if "class_weighted_mean" in summary:
        typer.echo(f"personalized, class-weighted global test (mean over clients): "
                   f"{summary['class_weighted_mean']:.4f}")
    typer.echo(f"report: {result.run_dir / 'report.md'}")


@app.command("init")
def init(
    folder: Annotated[Path, typer.Argument(help="new project folder (must not exist or be empty)")],
) -> None:
    """Write a runnable starter project: run.toml, model.py, data.py and a README."""
    from pflkit.server.starter import write_starter

    try:
        written = write_starter(folder)
    except OSError as err:  # not empty, a file on the way, no permission: one line
        raise _fail(err) from err
    for path in written:
        typer.echo(f"wrote {path}")
    typer.echo(f"next: cd {folder} && pfl-sim --config run.toml --out runs/first")


script = entry_point(app, "pfl-sim")  # the console script: usage errors in one line
