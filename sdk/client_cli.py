"""``pfl-client``: take part in a federated run from an edge device or a shell.

    pfl-client --server https://fl.example.org --token pfe_... --data DIR

DIR holds ``data.safetensors`` with ``x`` (N, *input_shape) float32, already preprocessed like the
run's dataset, and ``y`` (N,) int64 labels (write it with
``pflkit.sdk.client.save_client_data``). Credentials and the on-device state live in
``--state`` (default DIR/.pflkit); the token is needed only the first time. A run naming
``package.module:attr`` is refused (exit 2, before importing it) unless ``--allow-imports``
allows that package: built-in names and installed entry points need nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import torch
import typer

from pflkit.sdk.client import (
    FederatedClient,
    RetryPolicy,
    ServerRefused,
    ServerUnavailable,
    load_client_data,
)
from pflkit.sdk.console import entry_point
from pflkit.sdk.protocol import MAX_ID, MAX_WAIT, server_url_problem
from pflkit.sdk.registry import ImportPolicy, ImportRefused, add_project_path
from pflkit.sdk.transport import MAX_DOWNLOAD, MAX_ELAPSED, MAX_ERROR_ANSWER

app = typer.Typer(add_completion=False, help=__doc__)
LOG_LEVELS = ("debug", "info", "warning", "error")


def _log_level(value: str) -> str:
    if value.lower() not in LOG_LEVELS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(LOG_LEVELS)}")
    return value.lower()


def _number(value: float) -> str:
    """A bound as --help writes it: whole numbers in full (2^40 is 1099511627776, not 1.1e+12)."""
    return str(int(value)) if float(value).is_integer() else str(value)


def _bounded(what: str, low: float, high: float, *, open_low: bool = False) -> dict[str, Any]:
    """An option's ``help`` stating its range and the ``callback`` that checks exactly it.

    ``open_low``: (low, high] instead of [low, high]; NaN is outside every range.
    """
    stated = f"{'(' if open_low else '['}{_number(low)}, {_number(high)}]"

    def check(value: Any) -> Any:
        if value is None:
            return value
        if not ((low < value) if open_low else (low <= value)) or not value <= high:  # NaN too
            raise typer.BadParameter(f"must be in {stated}, got {value}")
        return value
    return {"help": f"{what}, {stated}", "callback": check}


def _server_url(value: str) -> str:
    """An http(s) URL with a host, checked at once: ``localhost:8000`` was retried for 600 s."""
    if problem := server_url_problem(value):
        raise typer.BadParameter(problem)
    return value


def _allow_imports(values: list[str] | None) -> list[str] | None:
    """Checked before any data is read: a malformed entry is a usage error (exit 2)."""
    try:
        ImportPolicy.allowing(values or (), "--allow-imports")
    except ValueError as err:
        raise typer.BadParameter(str(err).removeprefix("--allow-imports: ")) from None
    return values


@app.command()
def main(
    server: Annotated[str, typer.Option(callback=_server_url,
                                        help="base URL of pfl-server: http(s)://HOST[:PORT]")],
    data: Annotated[Path, typer.Option(help="folder with data.safetensors")],
    token: Annotated[str | None, typer.Option(help="enrollment token (first run only)")] = None,
    state: Annotated[Path | None, typer.Option(help="state folder (default DATA/.pflkit)")
                     ] = None,
    rounds: Annotated[int | None, typer.Option(**_bounded(
        "stop after training this many rounds (0: only enroll)", 0, MAX_ID))] = None,
    threads: Annotated[int | None, typer.Option(**_bounded("torch CPU threads", 1, 4096))
                       ] = None,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda | cuda:N, N in [0, 9999]")] = "cpu",
    precision: Annotated[str, typer.Option(help="fp32 | bf16 (training autocast)")] = "fp32",
    give_up_after: Annotated[float, typer.Option(**_bounded(
        "seconds of failed retries before giving up", 0, MAX_ELAPSED))] = 600.0,
    max_backoff: Annotated[float, typer.Option(**_bounded(
        "longest wait between retries, seconds", 0, MAX_WAIT, open_low=True))] = 10.0,
    max_download_bytes: Annotated[int, typer.Option(**_bounded(
        "largest global state to download, bytes", MAX_ERROR_ANSWER, 2**40))] = MAX_DOWNLOAD,
    answer_deadline: Annotated[float | None, typer.Option(**_bounded(
        "seconds an answer may take to arrive whole (default: timeout + bound at 64 KiB/s)",
        0, MAX_ELAPSED, open_low=True))] = None,
    allow_imports: Annotated[list[str] | None, typer.Option(
        callback=_allow_imports,
        help="a package (or package.module:attr) whose import paths a run may name; "
             "repeat it or separate with commas")] = None,
    log_level: Annotated[str, typer.Option(
        callback=_log_level,
        help=f"{' | '.join(LOG_LEVELS)} (debug also logs every HTTP request)")] = "info",
) -> None:
    """Enroll if needed, then train every round this device is sampled for until the run ends."""
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if log_level != "debug":  # httpx logs each request at INFO: a line per poll
        logging.getLogger("httpx").setLevel(logging.WARNING)
    if threads is not None:
        torch.set_num_threads(threads)
    add_project_path()  # a run's module:attr model or algorithm may live in this folder
    try:
        client = FederatedClient(server, state or data / ".pflkit", load_client_data(data),
                                 token=token, retry=RetryPolicy(cap=max_backoff,
                                                         max_elapsed=give_up_after),
                                 device=device, precision=precision,
                                 allow_imports=allow_imports or (),
                                 max_download_bytes=max_download_bytes,
                                 answer_deadline=answer_deadline)
        if not (client.state_dir / "credentials.json").is_file():
            raise typer.BadParameter("not enrolled yet: pass --token", param_hint="--token")
        trained = client.run(rounds)
    except ImportRefused as err:  # the run names code this device's owner did not allow
        typer.echo(f"pfl-client: {err}", err=True)
        raise typer.Exit(2) from err
    except (ServerRefused, ServerUnavailable, ValueError) as err:
        typer.echo(f"pfl-client: {err}", err=True)
        raise typer.Exit(1) from err
    except OSError as err:  # a file: the state folder full, read-only or not a folder
        where = f"{err.filename}: " if err.filename else ""
        typer.echo(f"pfl-client: {where}{err.strerror or err}", err=True)
        raise typer.Exit(1) from err
    typer.echo(f"client {client.client_id}: trained {trained} round(s)")


script = entry_point(app, "pfl-client")  # the console script: usage errors in one line
