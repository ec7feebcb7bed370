"""``pfl-admin status`` never shows a spent epsilon under 0.0005 as ``0.000``.

Before, the privacy line printed epsilon to 3 decimals: a run with a large noise multiplier
over a large population (epsilon 0.0004 after a round) read ``privacy: epsilon 0.000``, a
guarantee no DP run has.
"""

from rich.console import Console

from pflkit.server.admin_view import render_status
from pflkit.server.api.schemas import RunPublic


def test_a_tiny_epsilon_shows_its_digits():
    run = RunPublic(id=1, status="active", algorithm="fedavg", model="twonn", rounds_total=5,
                    rounds_done=1, global_hash="0" * 64, enrolled_clients=1000,
                    current_round=None, history=[],
                    privacy={"epsilon": 0.000412345, "delta": 1e-5, "rounds": 1,
                             "noise_multiplier": 1000.0, "target_epsilon": None, "clip_norm": 1.0,
                             "max_epsilon": 1.0, "accountant": "RDP",
                             "epsilon_left": 0.999587655})
    console = Console(width=400, color_system=None)
    with console.capture() as captured:
        console.print(render_status(run))
    assert ("privacy: epsilon 0.000412 at delta 1e-05 after 1 round; noise multiplier 1000, "
            "clip norm 1; budget 1, 1.000 left") in captured.get()
