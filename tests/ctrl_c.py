"""Ctrl-C for a child process, whatever the test runner's own SIGINT disposition.

A runner started in the background (``make test &`` from a script) ignores SIGINT; a child
inherits that, Python then installs no KeyboardInterrupt handler, and a test's Ctrl-C never
arrives. A user's terminal delivers it, so tests start such children with it restored.
"""

from __future__ import annotations

import signal


def restore_ctrl_c() -> None:
    """``preexec_fn`` for Popen: SIGINT's default action in the child, as in a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
