"""``pfl-sim``: run a federated simulation from a TOML config and/or flags."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from pflkit.sdk.run_config import ConfigError, SimConfig

app = typer.Typer(add_completion=False, help=__doc__)


def _parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def apply_overrides(config: SimConfig, flags: dict[str, Any], params: list[str]) -> SimConfig:
    """Flags win over the file: ``flags`` maps dotted config keys to values (None = unset)."""
    raw: dict[str, Any] = {}
    import tomllib

    raw = tomllib.loads(config.to_toml())
    for dotted, value in flags.items():
        if value is None:
            continue
        *path, leaf = dotted.split(".")
        node = raw
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    for item in params:
        if "=" not in item:
            raise ConfigError(f"--param expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        raw.setdefault("algorithm", {}).setdefault("params", {})[key.strip()] = _parse_value(value)
    return SimConfig.from_mapping(raw)


@app.command()
def main(
    config: Annotated[Path | None, typer.Option(help="TOML run configuration")] = None,
    out: Annotated[Path | None, typer.Option(help="run directory to create")] = None,
    resume: Annotated[Path | None, typer.Option(help="continue this stopped run directory")] = None,
    dataset: Annotated[str | None, typer.Option(help="fmnist, digits, mnist, ...")] = None,
    data_root: Annotated[str | None, typer.Option(help="folder with the dataset files")] = None,
    resize: Annotated[int | None, typer.Option(help="resize images to N x N")] = None,
    partition: Annotated[str | None, typer.Option(help="iid | shards | dirichlet")] = None,
    clients: Annotated[int | None, typer.Option(help="number of clients")] = None,
    alpha: Annotated[float | None, typer.Option(help="Dirichlet alpha")] = None,
    test_fraction: Annotated[float | None, typer.Option(help="clients' own test share")] = None,
    model: Annotated[str | None, typer.Option(help="twonn, twocnn, lenet5, ...")] = None,
    algorithm: Annotated[str | None, typer.Option(help="fedavg, fedprox, ...")] = None,
    param: Annotated[list[str] | None, typer.Option(help="algorithm hyperparameter K=V")] = None,
    rounds: Annotated[int | None, typer.Option()] = None,
    clients_per_round: Annotated[int | None, typer.Option()] = None,
    fraction: Annotated[float | None, typer.Option(help="share of clients per round")] = None,
    epochs: Annotated[int | None, typer.Option(help="local epochs")] = None,
    batch_size: Annotated[int | None, typer.Option()] = None,
    lr: Annotated[float | None, typer.Option()] = None,
    seed: Annotated[int | None, typer.Option()] = None,
    eval_interval: Annotated[int | None, typer.Option()] = None,
    executor: Annotated[str | None, typer.Option(help="sequential | batched | ray")] = None,
    device: Annotated[str | None, typer.Option(help="auto | cpu | cuda | cuda:N")] = None,
    precision: Annotated[str | None, typer.Option(help="fp32 | bf16 (training autocast)")
                         ] = None,
    ray_address: Annotated[str | None, typer.Option(help="join this Ray cluster")] = None,
    personalize_on: Annotated[str | None, typer.Option(
        help="post-federation stage engine: eager | executorch (docs/on-device.md)")] = None,
    quiet: Annotated[bool, typer.Option(help="no progress bars")] = False,
) -> None:
    """Run (or resume) a simulation and write its run directory and report."""
    from pflkit.server.simulator import Simulation

    logging.basicConfig(level=logging.WARNING)
    execution_flags = {"execution.executor": executor, "execution.device": device,
                       "execution.precision": precision, "execution.ray_address": ray_address,
                       "execution.personalize_on": personalize_on}
    try:
        if resume is not None:
            stored = SimConfig.load(resume / "config.toml") if (resume / "config.toml").is_file() \
                else None
            execution = apply_overrides(stored, execution_flags, []).execution if stored else None
            sim = Simulation.resume(resume, progress=not quiet, execution=execution)
        else:
            if out is None:
                raise typer.BadParameter("give --out RUN_DIR (or --resume RUN_DIR)")
            base = SimConfig.load(config) if config else SimConfig()
            flags = {
                "data.dataset": dataset, "data.root": data_root, "data.resize": resize,
                "data.kind": partition, "data.num_clients": clients, "data.alpha": alpha,
                "data.test_fraction": test_fraction, "model.name": model,
                "algorithm.name": algorithm, "rounds": rounds,
                "training.clients_per_round": clients_per_round, "training.fraction": fraction,
                "training.epochs": epochs, "training.batch_size": batch_size, "training.lr": lr,
                "seed": seed, "eval_interval": eval_interval, **execution_flags,
            }
            sim = Simulation(apply_overrides(base, flags, param or []), out, progress=not quiet)
        result = sim.run()
    except (ConfigError, ValueError, FileNotFoundError, FileExistsError, KeyError) as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from err
    summary = result.final.get("clients", {}).get("summary", {})
    typer.echo(f"global model top-1 on the global test set: "
               f"{result.final['global_model']['top1']:.4f}")
    if "class_weighted_mean" in summary:
        typer.echo(f"personalized, class-weighted global test (mean over clients): "
                   f"{summary['class_weighted_mean']:.4f}")
    typer.echo(f"report: {result.run_dir / 'report.md'}")
