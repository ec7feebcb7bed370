"""``pfl-admin``: enrollment tokens, clients and runs of a pfl-server, without curl.

    pfl-admin tokens create --count 3 > tokens.txt     # one token per line (or --json)
    pfl-admin clients list
    pfl-admin clients revoke 4
    pfl-admin runs create run.toml --set rounds=5
    pfl-admin runs pause | resume | stop [RUN_ID]
    pfl-admin status                                  # live view until the run ends (Ctrl-C)
    pfl-admin prune --keep-globals 5                  # delete what ended rounds left

The server URL and the admin token come from flags, the environment or a config file (see
``admin_settings.py`` and docs/admin.md). Runs with the base install: httpx, rich, typer and
pydantic only. Every failure is one line on stderr: exit status 1 when the server refused or
did not answer, 2 for a usage or configuration error.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.live import Live
from rich.text import Text

from pflkit.sdk import console
from pflkit.sdk.config_toml import apply_overrides, dump_toml, read_toml
from pflkit.sdk.config_types import ConfigError
from pflkit.sdk.protocol import MAX_ID
from pflkit.server.admin_client import MAX_DEADLINE, AdminClient, AdminError
from pflkit.server.admin_settings import SettingsError, resolve
from pflkit.server.admin_view import clients_table, created_line, prune_line, render_status, when
from pflkit.server.api.schemas import MAX_TOKEN_TTL

app = typer.Typer(add_completion=False, no_args_is_help=True)
tokens_app = typer.Typer(no_args_is_help=True, help="One-time enrollment tokens for devices.")
clients_app = typer.Typer(no_args_is_help=True, help="Enrolled clients.")
runs_app = typer.Typer(no_args_is_help=True, help="Create, pause, resume and stop runs.")
app.add_typer(tokens_app, name="tokens")
app.add_typer(clients_app, name="clients")
app.add_typer(runs_app, name="runs")

ENDED = ("stopped", "finished")  # run statuses after which nothing changes
RunArg = Annotated[int | None, typer.Argument(help="run id (default: the newest run)",
                                              min=0, max=MAX_ID, show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON instead of text")]


class _Failed(Exception):
    """A one-line failure of pfl-admin with its exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _fail(message: str, code: int = 2) -> NoReturn:
    raise _Failed(message, code)


@app.callback()
def _connection(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(help="server URL (env PFLKIT_URL; default "
                                            "http://127.0.0.1:8000)", show_default=False)
                   ] = None,
    token: Annotated[str | None, typer.Option(help="admin token (env PFLKIT_ADMIN_TOKEN)",
                                              show_default=False)] = None,
    token_file: Annotated[Path | None, typer.Option(help="file holding the admin token",
                                                    show_default=False)] = None,
    config: Annotated[Path | None, typer.Option(
        help="TOML with url, token or token_file (env PFLKIT_ADMIN_CONFIG; default "
             "~/.config/pflkit/admin.toml)", show_default=False)] = None,
    answer_deadline: Annotated[float, typer.Option(
        help=f"seconds each answer may take to arrive whole, in (0, {MAX_DEADLINE}] (a week)",
        callback=_seconds_within(MAX_DEADLINE, "a week"))] = 600.0,
) -> None:
    """Administer a pfl-server: enrollment tokens, clients, runs, live status.

    Flags beat the environment, which beats the config file (docs/admin.md).
    """
    ctx.obj = {"connection": {"url": url, "token": token, "token_file": token_file,
                              "config": config}, "answer_deadline": answer_deadline}


def _client(ctx: typer.Context) -> AdminClient:
    root = ctx.find_root()
    try:
        connection = resolve(**root.obj["connection"])
    except SettingsError as err:
        _fail(str(err))
    for warning in connection.warnings:
        typer.echo(f"pfl-admin: {warning}", err=True)
    return AdminClient(connection.url, connection.token, deadline=root.obj["answer_deadline"])


def _finite(value: float | None) -> float | None:
    """Refuse inf and nan (JSON cannot carry them, sleep cannot wait them)."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number of seconds")
    return value


def _seconds_within(high: int, spelled: str) -> Callable[[float | None], float | None]:
    """An option's check: None, or finite seconds in (0, ``high``] (``spelled`` in words)."""
    def check(value: float | None) -> float | None:
        if value is not None and not 0 < _finite(value) <= high:  # type: ignore[operator]
            raise typer.BadParameter(f"must be in (0, {high}] seconds ({spelled}), "
                                     f"got {value:g}")
        return value
    return check


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2))


# -- tokens and clients --------------------------------------------------------------------

@tokens_app.command("create")
def create_tokens(
    ctx: typer.Context,
    count: Annotated[int, typer.Option(min=1, max=10_000, help="how many, in [1, 10000]")] = 1,
    client_id: Annotated[int | None, typer.Option(
        min=0, max=MAX_ID, help="reserve client ids: the tokens enroll as CLIENT_ID, "
        f"CLIENT_ID+1, ...; CLIENT_ID in [0, {MAX_ID}]",
        show_default=False)] = None,
    ttl: Annotated[float | None, typer.Option(
        help=f"seconds until the tokens expire, in (0, {MAX_TOKEN_TTL}] (default: never)",
        show_default=False, callback=_seconds_within(MAX_TOKEN_TTL, "ten years"))] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create one-time enrollment tokens: one per line, or a JSON list with their ids.

    Each token is shown once. If the server refuses one midway, the tokens already created
    are still printed before the error.
    """
    if client_id is not None and client_id + count - 1 > MAX_ID:  # before any is created
        _fail(f"--client-id {client_id} with --count {count} reserves ids past {MAX_ID}")
    created: list[dict[str, Any]] = []
    try:
        with _client(ctx) as admin:
            for i in range(count):
                token = admin.create_token(None if client_id is None else client_id + i, ttl)
                created.append(token.model_dump())
                if not as_json:
                    typer.echo(token.token)
    finally:
        if as_json and created:
            _print_json(created)


@tokens_app.command("revoke")
def revoke_token(ctx: typer.Context, token_id: Annotated[int, typer.Argument(
        min=0, max=MAX_ID, help="the token's id")]) -> None:
    """Revoke an unused enrollment token (its id is in `tokens create --json`)."""
    with _client(ctx) as admin:
        admin.revoke_token(token_id)
    typer.echo(f"enrollment token {token_id} revoked")


@clients_app.command("list")
def list_clients(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every enrolled client: id, enrollment time, revoked, last upload (UTC)."""
    with _client(ctx) as admin:
        clients = admin.clients()
    if as_json:
        _print_json([c.model_dump() for c in clients])
        return
    Console().print(clients_table(clients) if clients else "no clients enrolled")


@clients_app.command("revoke")
def revoke_client(ctx: typer.Context, client_id: Annotated[int, typer.Argument(
        min=0, max=MAX_ID, help="the client's id")]) -> None:
    """Revoke a client: its secret stops working and it is no longer sampled."""
    with _client(ctx) as admin:
        admin.revoke_client(client_id)
    typer.echo(f"client {client_id} revoked")


# -- runs ----------------------------------------------------------------------------------

@runs_app.command("create")
def create_run(
    ctx: typer.Context,
    config: Annotated[Path, typer.Argument(help="the run's TOML (the config pfl-server and "
                                           "pfl-sim take)", show_default=False)],
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="override a key: KEY=VALUE, VALUE parsed as TOML")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a run; the server validates the config (a bad one is refused with its reason)."""
    try:  # a file that is not TOML is refused here, the schema is checked by the server
        text = dump_toml(apply_overrides(read_toml(config), set_ or []))
    except ConfigError as err:
        _fail(str(err))
    with _client(ctx) as admin:
        run = admin.create_run(text)
    if as_json:
        _print_json(run.model_dump())
    else:
        typer.echo(created_line(run))


def _transition(ctx: typer.Context, action: str, run_id: int | None, done: str) -> None:
    with _client(ctx) as admin:
        run = admin.transition(action, run_id)
    typer.echo(f"run {run.id} {done} ({run.rounds_done} of {run.rounds_total} rounds done)")


@runs_app.command("pause")
def pause_run(ctx: typer.Context, run_id: RunArg = None) -> None:
    """Pause: no tasks handed out, uploads refused until resumed."""
    _transition(ctx, "pause", run_id, "paused")


@runs_app.command("resume")
def resume_run(ctx: typer.Context, run_id: RunArg = None) -> None:
    """Resume a paused run; the open round gets a fresh deadline."""
    _transition(ctx, "resume", run_id, "resumed")


@runs_app.command("stop")
def stop_run(ctx: typer.Context, run_id: RunArg = None) -> None:
    """Stop a run for good; its open round is abandoned."""
    _transition(ctx, "stop", run_id, "stopped")


@app.command()
def prune(
    ctx: typer.Context,
    keep_globals: Annotated[int | None, typer.Option(
        min=1, max=MAX_ID, help=f"keep each run's newest N global states, N in [1, {MAX_ID}] "
        "(default: keep all)", show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="count, delete nothing")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete the blobs no round needs again (docs/admin.md: what goes, what always stays)."""
    with _client(ctx) as admin:
        report = admin.prune(keep_globals, dry_run)
    typer.echo(json.dumps(report.model_dump(), indent=2) if as_json else prune_line(report))


# -- status --------------------------------------------------------------------------------

@app.command()
def status(
    ctx: typer.Context,
    run_id: RunArg = None,
    once: Annotated[bool, typer.Option("--once", help="print one snapshot and exit")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print one snapshot as JSON")] = False,
    interval: Annotated[float, typer.Option(
        min=0.1, max=3600, callback=_finite, help="seconds between refreshes, [0.1, 3600]")] = 2.0,
) -> None:
    """Live view of a run (round, participants sampled/received, metrics) until it ends."""
    console = Console()
    with _client(ctx) as admin:
        run = admin.run(run_id)
        if as_json:
            _print_json(run.model_dump())
            return
        if once or run.status in ENDED:
            console.print(render_status(run))
            return
        try:
            with Live(render_status(run), console=console, auto_refresh=False) as live:
                while run.status not in ENDED:
                    time.sleep(interval)
                    view = render_status(run)
                    try:  # the run shown first, even if a newer one starts
                        run = admin.run(run.id)
                        view = render_status(run)
                    except AdminError as err:
                        if not err.passing:  # refused (token changed, run gone): end
                            raise
                        # no answer, or a 503 (the database restarting): keep asking
                        view.renderables.append(Text(f"{when(time.time())} {err}; retrying",
                                                     style="red"))
                    live.update(view, refresh=True)
        except KeyboardInterrupt:
            return


def main() -> None:
    """Entry point of the ``pfl-admin`` console script: failures are one line, no traceback.

    Usage errors too (sdk/console.py): ``pfl-admin: <reason> (see '<command> --help')``, exit 2.
    """
    try:
        code = console.run(app, "pfl-admin")
    except (AdminError, _Failed) as err:  # the server's (1), or ours before asking it (2)
        typer.echo(f"pfl-admin: {err}", err=True)
        raise SystemExit(err.code if isinstance(err, _Failed) else 1) from None
    raise SystemExit(code)
