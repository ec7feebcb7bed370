"""Run the fenced examples of one Markdown doc, in order, as a user would copy them.

The conventions (documented for doc writers in docs/contributing.md):

- ```` ```bash ````, ```` ```sh ````, ```` ```shell ```` blocks run as one ``bash`` script each
  (``set -euo pipefail``): every command must succeed.
- ```` ```console ```` blocks: lines starting with ``$ `` are commands (a trailing ``\\``
  continues one onto the next line); the other lines are sample output and are not compared.
- ```` ```python ```` blocks run as one script each (``python -c``, so modules in the current
  folder import): every example is complete, imports included, so a reader can paste it alone.
- ```` ```toml ```` / ```` ```json ```` blocks must parse. A TOML block whose first line is
  ``# NAME.toml`` is also written to NAME.toml for the blocks after it; one whose first line is
  ``# docs/configs/NAME.toml (excerpt)`` must agree with that file on every key it shows.
- Other blocks (``text``, ``kotlin``, directory trees) are not run, but an unlabelled block
  that starts like a command is an error: label it.

All blocks of one doc run in order in one fresh working directory, which holds symlinks to the
repository's ``docs/`` and ``.venv/`` (so ``docs/configs/demo.toml`` and ``.venv/bin/pfl-sim``
work as they do in a checkout); files carry over from block to block, and so does the directory
a shell block ended in (``cd my-project`` holds for the next blocks); shell variables do not.
The CLIs of the venv under test are first on ``PATH``.

Markers on the line right before a block (blank lines between are allowed):

- ``*Not run by `make test`: REASON*`` (visible to the reader): the block is skipped; the
  reason is required.
- ``<!-- make test: background, ready at URL -->``: the block is started in the background
  (e.g. ``pfl-server serve``); the next block runs once URL answers 200, and the process group
  is stopped when the doc is done. A doc with such a block runs in a private network namespace,
  so the doc can use the real default address (``http://127.0.0.1:8000``) while other tests run.

Run as ``python tests/docs_examples.py DOC WORKDIR`` (tests/test_docs.py does).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from docs_netns import loopback_up, private_network_prefix
from waiting import GUARD

REPO = Path(__file__).resolve().parent.parent
SHELLS = {"bash", "sh", "shell", "console"}
RUNNABLE = SHELLS | {"python"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)\s*$")
SKIP = re.compile(r"^\*Not run by `make test`: (?P<reason>.+)\*$")
BACKGROUND = re.compile(r"^<!-- make test: background, ready at (?P<url>\S+) -->$")
ANY_MARKER = re.compile(r"^(\W*not (run|tested)|<!--)", re.IGNORECASE)  # near-misses
COMMAND_LIKE = re.compile(r"^(\$ )?(pfl-[a-z-]+|make|python3?|pip|\.venv/bin/\S+|curl)( |$)")
INDENTED_COMMAND = re.compile(r"^( {4}|\t)\s*" + COMMAND_LIKE.pattern[1:])
EXCERPT = re.compile(r"^# (?P<path>docs/configs/\S+\.toml) \(excerpt\)$")
NAMED_FILE = re.compile(r"^# (?P<path>[\w./-]+\.toml)$")
BLOCK_TIMEOUT = 2 * GUARD  # a guard against a hung example only (machines may be busy)
READY_TIMEOUT = GUARD  # idem, for a background block's server to answer


class DocError(ValueError):
    """A doc breaks the conventions above (reported with its file and line)."""


@dataclass(frozen=True)
class Block:
    """One fenced block of a doc and its marker."""

    doc: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    skip_reason: str | None = None
    ready_url: str | None = None  # set: run in the background until the doc is done

    @property
    def where(self) -> str:
        return f"{self.doc.name}:{self.line}"


def parse(doc: Path) -> list[Block]:
    """Every fenced block of ``doc`` with its marker; raises DocError on a malformed one."""
    lines = doc.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            if i and not lines[i - 1].strip() and INDENTED_COMMAND.match(lines[i]):
                raise DocError(f"{doc.name}:{i + 1}: an indented code block holds a command: "
                               "use a fenced ```bash block (it then runs)")
            i += 1
            continue
        indent, fence, lang = opening["indent"], opening["fence"], opening["lang"].lower()
        end = i + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        if end == len(lines):
            raise DocError(f"{doc.name}:{i + 1}: the block is never closed")
        body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip()
                for ln in lines[i + 1:end]]
        blocks.append(_with_marker(doc, i, lang, "\n".join(body) + "\n", lines))
        i = end + 1
    return blocks


def _with_marker(doc: Path, i: int, lang: str, text: str, lines: list[str]) -> Block:
    where = f"{doc.name}:{i + 1}"
    above = next((ln.strip() for ln in reversed(lines[:i]) if ln.strip()), "")
    skip, background = SKIP.match(above), BACKGROUND.match(above)
    if ANY_MARKER.match(above) and not (skip or background):
        raise DocError(f"{where}: malformed marker {above!r} (see docs/contributing.md)")
    if skip and len(skip["reason"].split()) < 3:
        raise DocError(f"{where}: say in a few words why the block cannot run here")
    if (skip or background) and lang not in RUNNABLE:
        raise DocError(f"{where}: a marker only applies to {sorted(RUNNABLE)} blocks")
    if not lang and any(COMMAND_LIKE.match(ln.strip()) for ln in text.splitlines()):
        raise DocError(f"{where}: an unlabelled block holds commands: label it "
                       "```bash (runs) or ```text (sample output)")
    return Block(doc, i + 1, lang, text, skip["reason"] if skip else None,
                 background["url"] if background else None)


def console_script(text: str) -> str:
    """The commands of a console block (``$ `` lines and their ``\\`` continuations)."""
    commands, continuing = [], False
    for line in text.splitlines():
        if continuing or line.startswith("$ "):
            commands.append(line if continuing else line[2:])
            continuing = line.rstrip().endswith("\\")
    return "\n".join(commands) + "\n"


def check_data_block(block: Block, workdir: Path) -> None:
    """TOML / JSON blocks parse; a named TOML block is written, an excerpt must agree."""
    if block.lang == "json":
        json.loads(block.text)
        return
    data = tomllib.loads(block.text)
    first = block.text.splitlines()[0] if block.text.strip() else ""
    if excerpt := EXCERPT.match(first):
        whole = tomllib.loads((REPO / excerpt["path"]).read_text())
        for key, value in _flatten(data):
            actual = _lookup(whole, key)
            if actual != value:
                raise DocError(f"{key} = {value!r} here but {actual!r} in "
                               f"{excerpt['path']}")
    elif named := NAMED_FILE.match(first):
        target = workdir / named["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text)


def _flatten(table: dict, prefix: str = "") -> list[tuple[str, object]]:
    items = []
    for key, value in table.items():
        if isinstance(value, dict):
            items += _flatten(value, f"{prefix}{key}.")
        else:
            items.append((f"{prefix}{key}", value))
    return items


def _lookup(table: dict, dotted: str) -> object:
    for part in dotted.split("."):
        if not isinstance(table, dict) or part not in table:
            return "<missing>"
        table = table[part]
    return table


def environment(workdir: Path) -> dict[str, str]:
    """The environment of every block: the venv's CLIs first on PATH, one torch thread."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PFL_SERVER_", "PYTEST_", "PFLKIT_CRASH"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    # the suite runs two test processes on two cores: examples get one thread each
    env["OMP_NUM_THREADS"] = "1"
    env["HOME"] = str(workdir)
    env.pop("VIRTUAL_ENV", None)
    return env


def command(block: Block, scratch: Path) -> list[str]:
    """The argv that runs ``block``.

    A shell block leaves its last directory in ``scratch/cwd``: a reader's terminal stays
    where a ``cd`` took it, so the next block starts there.
    """
    if block.lang == "python":  # -c: the current folder is importable, as in a terminal
        return [sys.executable, "-c", block.text]
    script = console_script(block.text) if block.lang == "console" else block.text
    keep_cwd = f"trap 'pwd > {str(scratch / 'cwd')!r}' EXIT\n"
    return ["bash", "-c", "set -euo pipefail\n" + keep_cwd + script]


def wait_ready(url: str, proc: subprocess.Popen, where: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{where}: the background block exited ({proc.returncode}) "
                               f"before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:  # retried
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)  # poll
    raise RuntimeError(f"{where}: {url} did not answer within {READY_TIMEOUT} s")


def run_doc(doc: Path, workdir: Path) -> None:
    """Run every block of ``doc`` in ``workdir``; raise at the first failure."""
    blocks = parse(doc)
    scratch = workdir.parent / f"{workdir.name}-blocks"
    scratch.mkdir(exist_ok=True)
    workdir.mkdir(exist_ok=True)
    for name, target in (("docs", REPO / "docs"), (".venv", Path(sys.executable).parent.parent)):
        if not (workdir / name).exists():
            (workdir / name).symlink_to(target)
    env, background, cwd = environment(workdir), [], workdir
    try:
        for block in blocks:
            if block.lang in ("toml", "json"):
                try:
                    check_data_block(block, cwd)
                except ValueError as err:  # TOML / JSON syntax errors too
                    raise DocError(f"{block.where}: {err}") from err
                continue
            if block.lang not in RUNNABLE:
                continue
            if block.skip_reason:
                print(f"{block.where}: not run ({block.skip_reason})", flush=True)
                continue
            argv = command(block, scratch)
            started = time.monotonic()
            if block.ready_url:
                log = (scratch / f"background_{block.line}.log").open("w")
                proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
                background.append(proc)
                wait_ready(block.ready_url, proc, block.where)
            else:
                done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True,
                                      text=True, timeout=BLOCK_TIMEOUT)
                moved = scratch / "cwd"
                if block.lang in SHELLS and moved.is_file():
                    cwd = Path(moved.read_text().strip())
                if done.returncode != 0:
                    raise RuntimeError(f"{block.where}: exit status {done.returncode}\n"
                                       f"--- block ---\n{block.text}--- stdout ---\n"
                                       f"{done.stdout[-6000:]}--- stderr ---\n"
                                       f"{done.stderr[-6000:]}")
            print(f"{block.where}: ok in {time.monotonic() - started:.1f} s", flush=True)
    finally:
        for proc in background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(15)  # cleanup: killed after that
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()


def needs_private_network(doc: Path) -> bool:
    return any(b.ready_url for b in parse(doc))


def main() -> int:
    doc, workdir = Path(sys.argv[1]), Path(sys.argv[2])
    if needs_private_network(doc) and os.environ.get("PFLKIT_DOCS_NETNS") != "1":
        env = {**os.environ, "PFLKIT_DOCS_NETNS": "1"}
        argv = [*private_network_prefix(), sys.executable, __file__, str(doc), str(workdir)]
        return subprocess.run(argv, env=env).returncode
    if os.environ.get("PFLKIT_DOCS_NETNS") == "1":
        loopback_up()
    try:
        run_doc(doc, workdir)
    except (RuntimeError, DocError, subprocess.TimeoutExpired, ValueError) as err:
        print(f"FAILED {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
