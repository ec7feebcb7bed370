"""What ``pfl-admin`` prints: text and tables made from the server's answers, nothing else.

Pure functions of the answers (and the clock, passed in), so a view is tested without a
server; the commands that fetch the answers are in :mod:`pflkit.server.admin_cli`. Whatever
the server sent, a view is printable text: strings are never Rich markup and show each
unprintable character (an escape sequence) as ``?``; a timestamp out of range shows as ``?``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Group
from rich.table import Column, Table
from rich.text import Text

from pflkit.sdk.protocol import MAX_METRIC_NAME
from pflkit.server.api.schemas import (
    ClientPublic,
    PrivacyPublic,
    PrunePublic,
    RoundHistoryPublic,
    RunPublic,
)

HISTORY_ROWS = 10  # closed rounds shown by `status`
METRIC_COLUMNS = 12  # metrics shown: the server's own (participants, samples, DP's) and a few more


def plural(count: int, noun: str) -> str:
    """``1 client``, ``2 clients``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def when(seconds: float | None) -> str:
    """A server timestamp as UTC date and time ("-" for none, "?" for none a date can be)."""
    if seconds is None:
        return "-"
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, ValueError, OSError):  # 1e300, NaN: not a time
        return "?"


def printable(text: str) -> str:
    """``text`` with each unprintable character (ESC, a line break) shown as ``?``."""
    return "".join(c if c.isprintable() else "?" for c in text)


def clients_table(clients: Sequence[ClientPublic]) -> Table:
    """Every enrolled client: id, enrollment time, revoked, last upload (UTC)."""
    table = Table("client", "enrolled (UTC)", "revoked", "last upload (UTC)")
    for c in clients:
        table.add_row(str(c.id), when(c.enrolled_at), "yes" if c.revoked else "no",
                      when(c.last_seen))
    return table


def prune_line(p: PrunePublic) -> str:
    """What a prune freed, in one line."""
    verb = "would delete" if p.dry_run else "deleted"
    return (f"{verb} {plural(p.files, 'blob')}, {_megabytes(p.bytes)} MB ({p.updates} of ended "
            f"rounds' updates, {plural(p.global_states, 'older global state')}, "
            f"{p.unreferenced} named by no row); kept {p.recent} written in the last hour")


def _megabytes(count: int) -> str:
    """Bytes as MB to one decimal, in integers: a float overflows at 10^309 (a lying server)."""
    tenths = (count + 50_000) // 100_000
    return f"{tenths // 10}.{tenths % 10}"


def device_text(text: str) -> Text:
    """A string a device chose (a metric name), fit for the operator's terminal.

    Plain text, never Rich markup (``[/bold]`` raised MarkupError on every refresh), with
    control and other unprintable characters (an escape sequence) shown as ``?``, and at most
    ``MAX_METRIC_NAME`` characters (what uploads may use; older rows are cut).
    """
    clean = printable(text)
    return Text(clean if len(clean) <= MAX_METRIC_NAME else f"{clean[:MAX_METRIC_NAME - 1]}…")


def _number(value: Any) -> Text:
    """A metric's cell; ``n/a`` for null: a number the server could not define (inf, NaN)."""
    if value is None:
        return Text("n/a")
    return Text(f"{value:.4g}" if isinstance(value, float) else printable(str(value)))


def created_line(run: RunPublic) -> str:
    """A new run: ``run 2 created: fedavg / twonn, 5 rounds, 3 clients enrolled``."""
    return printable(f"run {run.id} created: {run.algorithm} / {run.model}, "
                     f"{plural(run.rounds_total, 'round')}, "
                     f"{plural(run.enrolled_clients, 'client')} enrolled")


def _ids(ids: list[int]) -> str:
    return ", ".join(map(str, ids)) if ids else "none"


def epsilon_text(epsilon: float) -> str:
    """Epsilon to 3 decimals, or 3 significant digits under 0.001: never a false ``0.000``."""
    return f"{epsilon:.3f}" if epsilon == 0 or abs(epsilon) >= 0.001 else f"{epsilon:.3g}"


def privacy_line(p: PrivacyPublic) -> str:
    """DP-FedAvg's epsilon after the closed rounds, its settings and the budget left."""
    noise = "calibrated when round 0 closes" if p.noise_multiplier is None \
        else f"{p.noise_multiplier:.4g}"
    budget = "no budget" if p.max_epsilon is None else \
        f"budget {p.max_epsilon:g}, {epsilon_text(max(0.0, p.epsilon_left or 0.0))} left"
    return (f"privacy: epsilon {epsilon_text(p.epsilon)} at delta {p.delta:g} after "
            f"{plural(p.rounds, 'round')}; noise multiplier {noise}, clip norm "
            f"{p.clip_norm:g}; {budget}")


def render_status(run: RunPublic, now: float | None = None) -> Group:
    """One snapshot of a run: headline, the open round's participants, recent rounds' metrics."""
    now = time.time() if now is None else now
    head = Text.assemble(
        (f"run {run.id}", "bold"), printable(f"  {run.status}  {run.algorithm} / {run.model}  "),
        (f"rounds {run.rounds_done}/{run.rounds_total} done", "bold"),
        f"  {plural(run.enrolled_clients, 'client')} enrolled")
    parts: list[Any] = [head]
    if run.stopped_reason is not None:
        parts.append(Text(printable(f"stopped by the server: {run.stopped_reason}")))
    if run.privacy is not None:
        parts.append(Text(privacy_line(run.privacy)))
    current = run.current_round
    if current is not None:
        waiting = sorted(set(current.sampled) - set(current.received))
        left = max(0.0, current.deadline - now)
        parts.append(Text(printable(
            f"round {current.index} {current.status}: received {len(current.received)} of "
            f"{len(current.sampled)} sampled (sampled {_ids(current.sampled)}; "
            f"waiting for {_ids(waiting)}); deadline in {left:.0f} s")))
    elif run.status == "active":
        parts.append(Text("no round open (waiting for enough enrolled clients)"))
    if run.history:
        shown = run.history[-HISTORY_ROWS:]
        names, hidden = metric_columns(shown)
        table = Table("round", "closed (UTC)", *(Column(device_text(n)) for n in names),
                      title="closed rounds", title_justify="left")
        for r in shown:
            table.add_row(str(r.index), when(r.closed_at),
                          *(_number(r.metrics.get(name, "-")) for name in names))
        parts.append(table)
        if hidden:
            parts.append(Text(f"{plural(hidden, 'more metric')} of these rounds not shown "
                              "(status --json lists every one)"))
    return Group(*parts)


def metric_columns(rounds: Sequence[RoundHistoryPublic]) -> tuple[list[str], int]:
    """The metrics the table shows, by name, and how many others the rounds have.

    At most ``METRIC_COLUMNS``: those most of ``rounds`` have, then by name. A device may name
    64 new metrics each upload; a column for every name the run ever saw made a table of
    thousands of columns, squeezed to nothing and slow to draw at each refresh.
    """
    counts = Counter(name for r in rounds for name in r.metrics)
    ranked = sorted(counts, key=lambda name: (-counts[name], name))
    return sorted(ranked[:METRIC_COLUMNS]), max(0, len(ranked) - METRIC_COLUMNS)
