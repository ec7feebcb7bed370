"""pfl-admin's views show what devices chose (metric names) as plain, short text; null as n/a."""

from rich.console import Console

from pflkit.server.admin_view import render_status
from pflkit.server.api.schemas import RunPublic


def _shown(run: RunPublic) -> str:
    console = Console(width=400, force_terminal=True, color_system=None)
    with console.capture() as captured:
        console.print(render_status(run))
    return captured.get()


def _run(metrics: dict) -> RunPublic:
    return RunPublic(id=1, status="active", algorithm="fedavg", model="twonn", rounds_total=2,
                     rounds_done=1, global_hash="0" * 64, enrolled_clients=3, current_round=None,
                     history=[{"index": 0, "closed_at": 0.0, "global_hash": None,
                               "metrics": {"participants": 2, **metrics}}])


def test_a_metric_the_server_could_not_define_shows_as_n_a():
    """A null metric (docs/server.md: a mean the server could not define) printed ``None``."""
    shown = _shown(_run({"train_loss": None}))
    assert "n/a" in shown and "None" not in shown


def test_metric_names_devices_chose_are_shown_as_plain_short_text():
    """``[/bold]`` raised Rich's MarkupError in every `status`; ESC reached the terminal raw."""
    names = ["[/bold]", "\x1b[2J\x1b]0;owned\x07loss", "y" * 5000]
    shown = _shown(_run(dict.fromkeys(names, 1.5)))
    assert "[/bold]" in shown and "?[2J?]0;owned?loss" in shown
    assert "\x1b" not in shown and "\x07" not in shown
    assert "y" * 63 + "…" in shown and "y" * 64 not in shown
