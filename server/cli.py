"""``pfl-server``: serve a federated run over HTTP (FastAPI + uvicorn).

    pfl-server serve --data-dir DIR --run-config run.toml --admin-token-file token.txt
    pfl-server serve --config server.toml        # any setting, see docs/server.md

Flags override ``PFL_SERVER_*`` environment variables, which override the config file.
Before the workers start, the database is prepared once: tables created, the run of
``--run-config`` created if there is none, rounds a crash left mid-close reopened and blobs a
crash left half-written deleted. This process then keeps the rounds (a ticker thread: open,
close at quorum or deadline) while uvicorn's HTTP workers, which never import PyTorch, serve
the API.
"""

from __future__ import annotations

import getpass
import inspect
import json
import logging
import os
import socket
import ssl
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
import uvicorn
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from pflkit.sdk.config_types import ConfigError
from pflkit.sdk.console import entry_point
from pflkit.sdk.registry import add_project_path
from pflkit.server.admin_settings import SettingsError, exposed_warning, read_token_file
from pflkit.server.db import driver_message, shown_url
from pflkit.server.errors import ServiceError
from pflkit.server.http_protocol import BoundedHeadProtocol
from pflkit.server.service import build_service, undone_if_refused
from pflkit.server.settings import ENV_PREFIX, NUMBERS, ServerSettings, explain
from pflkit.server.ticker import WAKE_ENV, Ticker

app = typer.Typer(add_completion=False, help=__doc__)


class LogLevel(StrEnum):
    """``--log-level``: another word was a traceback from logging at start."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


def number(setting: str, what: str = "") -> typer.models.OptionInfo:
    """The flag of a number setting, its range in its help; passed on as text.

    The settings read it as JSON spells numbers: click's int() and float() took 1_0 for 10,
    and +5 or " 7 ".
    """
    kind, stated_range = NUMBERS[setting]
    return typer.Option(metavar="INTEGER" if kind is int else "NUMBER",
                        help=f"{stated_range}{'; ' if what else ''}{what}")


@app.callback()
def _main() -> None:
    """Pflkit aggregation server."""


def flagged_settings() -> set[str]:
    """The settings ``serve`` takes as flags (errors name the flag, else the file's key)."""
    return {*inspect.signature(serve).parameters} & {*ServerSettings.model_fields} | \
        {"admin_token", "run_overrides"}  # as --admin-token-file, --set


def check_listener(settings: ServerSettings) -> str | None:
    """Refuse an address or TLS pair uvicorn cannot use, before anything is created.

    uvicorn finds out only once it starts, after the database and the first run were made:
    a traceback (a TLS file missing or not PEM) or its own line and exit 3 (a port in use).
    Returns the TLS key's pass phrase, asked here without echo if the key has one, for
    uvicorn's workers: OpenSSL asked once here and again in each worker.
    """
    passphrase: list[str] = []
    if settings.tls_certfile is not None:
        files = f"--tls-certfile {settings.tls_certfile}, --tls-keyfile {settings.tls_keyfile}"

        def ask() -> str:  # called only for an encrypted key
            try:  # no terminal: the first line of standard input
                passphrase.append(getpass.getpass(
                    f"pfl-server: pass phrase of {settings.tls_keyfile}: "))
            except EOFError:
                typer.echo(err=True)  # ends the prompt's line
                raise ConfigError(f"{files}: the key is encrypted and no pass phrase came "
                                  "(none on the terminal or standard input)") from None
            return passphrase[0]

        try:  # what uvicorn does with them
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
                settings.tls_certfile, settings.tls_keyfile, password=ask)
        except ConfigError:
            raise
        except (OSError, ValueError) as err:  # ssl.SSLError; a pass phrase of over 1024 bytes
            problem = ", or not the key's pass phrase" if passphrase else ""
            why = " ".join(str(getattr(err, "strerror", None) or err).split())
            raise ConfigError(f"{files}: not a certificate and its key{problem} ({why})") from err
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET  # as uvicorn binds
    try:
        with socket.socket(family) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((settings.host, settings.port))
    except OSError as err:
        raise ConfigError(f"--host {settings.host} --port {settings.port}: cannot listen there "
                          f"({(err.strerror or str(err)).lower()})") from err
    return passphrase[0] if passphrase else None


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option(help="TOML file with server settings")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="database, blobs, scratch")] = None,
    database_url: Annotated[str | None, typer.Option(help="SQLAlchemy URL (postgresql://...)")
                            ] = None,
    run_config: Annotated[Path | None, typer.Option(help="pfl-sim TOML of the run")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="override a key of the run config: KEY=VALUE, VALUE parsed as TOML")
                    ] = None,
    allow_imports: Annotated[list[str] | None, typer.Option(
        help="a package (or package.module:attr) whose import paths run configs may name; "
             "repeat it or separate with commas")] = None,
    dataset_dir: Annotated[Path | None, typer.Option(
        help="folder that a run config's data.root must lie in")] = None,
    host: Annotated[str | None, typer.Option()] = None,
    port: Annotated[str | None, number("port", "0: pick a free port")] = None,
    workers: Annotated[str | None, number("workers")] = None,
    admin_token_file: Annotated[Path | None, typer.Option(help="file holding the admin token")
                                ] = None,
    clients_per_round: Annotated[str | None, number("clients_per_round")] = None,
    min_clients: Annotated[str | None, number("min_clients", "uploads that close a round")
                           ] = None,
    min_enrolled: Annotated[str | None, number("min_enrolled")] = None,
    round_deadline: Annotated[str | None, number("round_deadline", "seconds")] = None,
    max_upload_bytes: Annotated[str | None, number("max_upload_bytes")] = None,
    max_num_samples: Annotated[str | None, number(
        "max_num_samples", "bound on an update's weight")] = None,
    max_header_bytes: Annotated[str | None, number(
        "max_header_bytes", "longer request heads: 431")] = None,
    header_timeout: Annotated[str | None, number(
        "header_timeout", "seconds to send a request head; then the connection is closed")
                              ] = None,
    body_timeout: Annotated[str | None, number(
        "body_timeout", "seconds a request body may pause; then 408 and the connection is "
                        "closed")] = None,
    max_json_bytes: Annotated[str | None, number("max_json_bytes", "larger JSON bodies: 413")
                              ] = None,
    keep_alive_timeout: Annotated[str | None, number(
        "keep_alive_timeout", "seconds an idle connection stays open")] = None,
    auth_failure_limit: Annotated[str | None, number(
        "auth_failure_limit", "failed authentications per address and window before 429")
                                  ] = None,
    auth_failure_window: Annotated[str | None, number("auth_failure_window", "seconds")] = None,
    aggregation: Annotated[str | None, typer.Option(help="mean | median | trimmed_mean")
                           ] = None,
    clip_norm: Annotated[str | None, number("clip_norm")] = None,
    dp_clip_norm: Annotated[str | None, number(
        "dp_clip_norm", "require DP-FedAvg of every run, clipping at most this "
                        "(docs/privacy.md)")] = None,
    dp_noise_multiplier: Annotated[str | None, number("dp_noise_multiplier", "at least this")
                                   ] = None,
    dp_target_epsilon: Annotated[str | None, number("dp_target_epsilon", "at most this")
                                 ] = None,
    dp_delta: Annotated[str | None, number("dp_delta", "at most this")] = None,
    dp_max_epsilon: Annotated[str | None, number("dp_max_epsilon", "a budget of at most this")
                              ] = None,
    tls_certfile: Annotated[Path | None, typer.Option()] = None,
    tls_keyfile: Annotated[Path | None, typer.Option()] = None,
    api_docs: Annotated[bool | None, typer.Option(
        help="serve the API description at /docs, /redoc, /openapi.json (to anyone)")] = None,
    log_level: Annotated[LogLevel, typer.Option(case_sensitive=False)] = LogLevel.info,
) -> None:
    """Prepare the database, then serve the API until interrupted."""
    flags = {"data_dir": data_dir, "database_url": database_url, "run_config": run_config,
             "run_overrides": json.dumps(set_) if set_ else None,
             "allow_imports": ",".join(allow_imports) if allow_imports else None,
             "dataset_dir": dataset_dir,
             "host": host, "port": port, "workers": workers,
             "clients_per_round": clients_per_round, "min_clients": min_clients,
             "min_enrolled": min_enrolled, "round_deadline": round_deadline,
             "max_upload_bytes": max_upload_bytes, "max_num_samples": max_num_samples,
             "max_header_bytes": max_header_bytes, "keep_alive_timeout": keep_alive_timeout,
             "header_timeout": header_timeout, "body_timeout": body_timeout,
             "max_json_bytes": max_json_bytes,
             "auth_failure_limit": auth_failure_limit,
             "auth_failure_window": auth_failure_window, "aggregation": aggregation,
             "clip_norm": clip_norm, "dp_clip_norm": dp_clip_norm,
             "dp_noise_multiplier": dp_noise_multiplier, "dp_target_epsilon": dp_target_epsilon,
             "dp_delta": dp_delta, "dp_max_epsilon": dp_max_epsilon,
             "tls_certfile": tls_certfile, "tls_keyfile": tls_keyfile, "api_docs": api_docs}
    if admin_token_file is not None:
        try:
            flags["admin_token"] = read_token_file(admin_token_file)
        except SettingsError as err:
            typer.echo(f"pfl-server: {err}", err=True)
            raise typer.Exit(2) from err
        warning = exposed_warning(admin_token_file)
        if warning is not None:
            typer.echo(f"pfl-server: {warning}", err=True)
    # workers rebuild the settings from the environment: flags become environment variables
    for name, value in flags.items():
        if value is not None:
            os.environ[f"{ENV_PREFIX}{name.upper()}"] = str(value)
    if config is not None:
        os.environ[f"{ENV_PREFIX}CONFIG_FILE"] = str(config)
    logging.basicConfig(level=log_level.value.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    add_project_path()  # run configs may name module:attr paths (uvicorn workers inherit it)
    # imported here, not at the top: uvicorn's workers re-import this module (multiprocessing
    # spawn), and they must stay without PyTorch
    from pflkit.sdk.run_config import SimConfig

    try:
        settings = ServerSettings.load()
        tls_passphrase = check_listener(settings)
        run_toml = None
        if settings.run_config is not None:  # validated whole before anything is created
            add_project_path(settings.run_config.parent)
            run_toml = SimConfig.load(settings.run_config, settings.run_overrides,
                                      settings.imports).to_toml()
        with undone_if_refused(settings):
            service = build_service(settings)
            service.runs.ensure(run_toml)
            reopened = service.rounds.recover()
            partial = service.store.blobs.remove_partial_writes()
    except ValidationError as err:
        typer.echo(f"pfl-server: {explain(err)}", err=True)
        raise typer.Exit(2) from err
    except (ConfigError, ServiceError) as err:
        typer.echo(f"pfl-server: {err}", err=True)
        raise typer.Exit(2) from err
    except OSError as err:  # a folder that is a file, no permission: name it, no "[Errno 20]"
        where = f"{err.filename}: {err.strerror}" if err.filename and err.strerror else err
        typer.echo(f"pfl-server: {where}", err=True)
        raise typer.Exit(2) from err
    except SQLAlchemyError as err:  # not a database file, unreachable, a bad URL: one line
        typer.echo(f"pfl-server: database {shown_url(settings.db_url)}: {driver_message(err)}",
                   err=True)
        raise typer.Exit(2) from err
    if reopened:
        logging.getLogger(__name__).warning("reopened %d round(s) a crash left closing", reopened)
    if partial:
        logging.getLogger(__name__).warning("deleted %d blob(s) a crash left half-written",
                                            partial)
    ticker = Ticker(service.rounds, settings.tick_seconds)
    os.environ[WAKE_ENV] = ticker.socket_path  # the workers' uploads wake it
    ticker.start()
    try:
        uvicorn.run("pflkit.server.app:create_app", factory=True, host=settings.host,
                    http=BoundedHeadProtocol, port=settings.port, workers=settings.workers,
                    log_level=log_level.value, ssl_certfile=settings.tls_certfile,
                    ssl_keyfile=settings.tls_keyfile, ssl_keyfile_password=tls_passphrase,
                    timeout_graceful_shutdown=5,
                    timeout_keep_alive=settings.keep_alive_timeout,  # type: ignore[arg-type]
                    # a worker importing PyTorch (a run created, an algorithm query) on a busy
                    # machine can miss uvicorn's default 5 s ping and be killed as hung
                    timeout_worker_healthcheck=120)
    finally:
        ticker.stop()


script = entry_point(app, "pfl-server")  # the console script: usage errors in one line
