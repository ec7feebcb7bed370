"""bench-server's optional profile: py-spy samples of the server's processes (PROFILE=1 or idle)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

from common import RESULTS
from server_load import ROOT


class Profile:
    """PROFILE=1 (on-CPU) or PROFILE=idle (wall time, waits included): py-spy samples the
    server's processes during the load rounds of the first run; a summary goes to
    results/server_profile.md (functions by own and by inclusive samples, per process)."""

    def __init__(self, pid: int, mode: str) -> None:
        self.raw = ROOT.parent / "server_profile.txt"
        self.mode = mode
        local = Path(sys.executable).parent / "py-spy"
        spy = str(local) if local.is_file() else shutil.which("py-spy")
        if spy is None:
            raise SystemExit("PROFILE needs py-spy (pip install py-spy; in pflkit's dev extra)")
        command = [spy, "record", "--pid", str(pid),
                   "--subprocesses", "--format", "raw", "--rate", "100", "--nonblocking",
                   "-o", str(self.raw)] + (["--idle"] if mode == "idle" else [])
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)
        by_process: dict[str, dict[str, dict[str, int]]] = {}
        for line in self.raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            frames = stack.split(";")
            # a worker's stack starts with its supervisor's process frame, then its own
            deepest = max((i for i, f in enumerate(frames) if f.startswith("process ")),
                          default=0)
            process = frames[deepest].split(":")[0]
            role = "supervisor" if "pfl-server" in frames[deepest] else "worker " + process
            frames = frames[deepest:]
            tables = by_process.setdefault(role, {"own": {}, "inclusive": {}, "total": {}})
            tables["total"][""] = tables["total"].get("", 0) + int(count)
            own = frames[-1]
            tables["own"][own] = tables["own"].get(own, 0) + int(count)
            for frame in set(frames[1:]):
                tables["inclusive"][frame] = tables["inclusive"].get(frame, 0) + int(count)
        mode = "wall time" if self.mode == "idle" else "on-CPU"
        lines = [f"# bench-server profile (py-spy, {mode}, 100 Hz, the load rounds of "
                 "the first run)\n"]
        for role, tables in sorted(by_process.items()):
            total = tables["total"][""]
            lines.append(f"\n## {role}: {total} samples\n\n| own % | function |\n|---|---|")
            for frame, n in sorted(tables["own"].items(), key=lambda kv: -kv[1])[:15]:
                lines.append(f"| {100 * n / total:.1f} | `{frame}` |")
            lines.append("\n| inclusive % | function |\n|---|---|")
            for frame, n in sorted(tables["inclusive"].items(), key=lambda kv: -kv[1])[:30]:
                lines.append(f"| {100 * n / total:.1f} | `{frame}` |")
        (RESULTS / "server_profile.md").write_text("\n".join(lines) + "\n")
        print(f"profile summary: {RESULTS / 'server_profile.md'}", flush=True)
