"""The console scripts' entry points: a usage error is one line, exit 2, like every other error.

click (under typer) frames a usage error in a 5-6 line panel with the usage synopsis; the
docs promise one line for every bad input, so each ``pfl-*`` script runs its typer app through
:func:`run`: ``pfl-sim: No such option: --bogus (see 'pfl-sim --help')``. A group called
without its command still shows its help, as click does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import typer

try:  # the click that parses the command line: typer's own copy since typer 0.2x
    from typer._click import exceptions as click_errors
except ImportError:
    from click import exceptions as click_errors  # type: ignore[no-redef]


def run(app: typer.Typer, prog: str) -> int:
    """Run ``app`` on ``sys.argv``; the exit status, with click's errors printed as one line."""
    try:
        code = app(standalone_mode=False)
    except click_errors.ClickException as err:
        if isinstance(err, getattr(click_errors, "NoArgsIsHelpError", ())):
            err.show()  # a group without its command: the help, as click shows it
        else:
            ctx = getattr(err, "ctx", None)  # usage errors know their command
            where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            reason = " ".join(err.format_message().split()).rstrip(".")
            typer.echo(f"{prog}: {reason}{where}", err=True)
        return err.exit_code
    except typer.Abort:  # end of input at a prompt (Ctrl-C is exit 130 already)
        typer.echo(f"{prog}: aborted", err=True)
        return 1
    return code if isinstance(code, int) else 0


def entry_point(app: typer.Typer, prog: str) -> Callable[[], None]:
    """The ``[project.scripts]`` target of a typer app: :func:`run`, then exit with its status."""
    def main() -> None:
        sys.exit(run(app, prog))
    main.__doc__ = f"Entry point of ``{prog}``: errors are one line (sdk/console.py)."
    return main
