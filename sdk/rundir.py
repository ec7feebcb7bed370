"""The layout of a ``pfl-sim`` run directory, written down once for its writer and its readers.

    config.toml                    the validated run config (canonical TOML)
    partition.safetensors          each client's train/test rows (and noisy labels): export
                                   finds one client's data without re-dealing the dataset
    partition.txt, plots/          the partition as a table, and the report's plots
    global/latest.safetensors      the newest committed global state (metadata: rounds_done,
                                   and dp_clip_norm, the next round's C, with DP)
    global/round_<r>.safetensors   checkpoints every checkpoint_interval rounds and the last
    clients/<id>.r<r>.safetensors  each client's private state, versioned by round
    personalized/<id>.safetensors  client states after a post-federation stage
    metrics.jsonl, final.json      per-round rows and the final per-client evaluation
    report.md                      the human-readable report
    exports/                       what pfl-export writes by default

The simulator writes it; ``pfl-export``, the report and the benchmarks read it through here.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from pflkit.sdk.config_types import stored_settings
from pflkit.sdk.data.federation import Partition
from pflkit.sdk.phases import phase
from pflkit.sdk.registry import OWN_CONFIG, ImportPolicy
from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.sdk.state_store import RunClientStore
from pflkit.sdk.tensorio import (
    CorruptStateError,
    json_text,
    load_state,
    read_file_metadata,
    save_state,
)

CLIP_NORM_KEY = "dp_clip_norm"  # global checkpoint metadata: the next round's C (repr)
# global checkpoint metadata: the TOML of SimConfig.computed_part(), what its rounds ran under
RUN_CONFIG_KEY = "run_config"


def checkpoint_round(path: Path) -> int | None:
    """The ``rounds_done`` a global checkpoint records (None: not recorded); checks the file."""
    text = read_file_metadata(path).get("rounds_done")  # errors name the file
    if text is None:
        return None
    if not text.isdigit():
        raise CorruptStateError(f"{path}: its 'rounds_done' metadata is not a round count: "
                                f"{text!r}")
    return int(text)


def check_creatable(path: Path) -> Path:
    """Refuse, before any work, a new run directory that a file or permissions block.

    Returns the nearest folder that exists already (``path`` itself, or an ancestor).
    """
    existing = path.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise NotADirectoryError(f"cannot create the run directory {path}: {existing} is a file")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot create the run directory {path}: {existing} is not "
                              f"writable")
    return existing


class RunDir:
    """Paths and small readers of one run directory."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.config_file = self.path / "config.toml"
        self.partition_file = self.path / "partition.safetensors"
        self.partition_table = self.path / "partition.txt"
        self.plots = self.path / "plots"
        self.latest = self.path / "global" / "latest.safetensors"
        self.metrics = self.path / "metrics.jsonl"
        self.final = self.path / "final.json"
        self.report = self.path / "report.md"
        self.exports = self.path / "exports"
        self.clients = RunClientStore(self.path / "clients")

    def __str__(self) -> str:
        return str(self.path)

    def checkpoint(self, rounds_done: int) -> Path:
        """The global checkpoint written after ``rounds_done`` rounds."""
        return self.path / "global" / f"round_{rounds_done}.safetensors"

    def checkpoints(self) -> list[int]:
        """Rounds with a stored global checkpoint, ascending."""
        folder = self.path / "global"
        return sorted(int(p.stem.removeprefix("round_")) for p in folder.glob("round_*"))

    def own_files(self) -> tuple[Path, ...]:
        """The files a run writes here (exports go elsewhere: ``exports/`` or any folder)."""
        return (self.config_file, self.partition_file, self.partition_table, self.metrics,
                self.final, self.report)

    def own_folders(self) -> tuple[Path, ...]:
        """The folders a run keeps its state and plots in: nothing else may write inside."""
        return self.plots, self.path / "global", self.clients.root, self.path / "personalized"

    def refuse_fresh_run(self) -> None:
        """Refuse to start a fresh run here over a run's files, a stopped run's or anyone's.

        It would overwrite them, and a failed run deletes them (``discard``), whoever wrote
        them; a stopped run continues with ``--resume``. Nor inside another run's state
        folders (``RUN/global/x``): that run's files would hold a second run's.
        """
        here = self.path.resolve()
        for parent in here.parents:
            outer = RunDir(parent)
            inside = [f for f in outer.own_folders() if here.is_relative_to(f)]
            if inside and (outer.latest.exists() or outer.partition_file.exists()):
                raise FileExistsError(f"{self.path} lies inside {inside[0]}, where the run "
                                      f"{parent} keeps its state: choose another --out")
        if self.latest.exists():
            done = checkpoint_round(self.latest)
            rounds = "" if done is None else f" ({done} round{'' if done == 1 else 's'} done)"
            raise FileExistsError(f"{self.path} already holds a run{rounds}: continue it "
                                  f"with --resume {self.path}, or choose another --out")
        present = [p.name for p in (*self.own_files(), *self.own_folders())
                   if p.exists()]
        if present:
            raise FileExistsError(f"{self.path} already holds {', '.join(present)}, which a "
                                  "run writes: choose another --out, or delete them")

    def discard(self, existing: Path) -> None:
        """Remove what a run wrote here, then the folders it created below ``existing``.

        A fresh run that fails calls this, so that the same ``--out`` works again; anything
        else in the folder (``exports/``, the user's files) stays.
        """
        for file in self.own_files():
            file.unlink(missing_ok=True)
        for folder in self.own_folders():
            shutil.rmtree(folder, ignore_errors=True)
        folder = self.path.absolute()
        while folder != existing and not (folder.is_dir() and any(folder.iterdir())):
            if folder.is_dir():
                folder.rmdir()
            folder = folder.parent

    def personalized(self, client_id: int) -> Path:
        """A client's state after the post-federation stage."""
        return self.path / "personalized" / f"{client_id}.safetensors"

    def config(self) -> SimConfig:
        """The run's config (ConfigError if it is missing or invalid)."""
        if not self.config_file.is_file():
            raise ConfigError(f"{self.path} is not a pfl-sim run directory (no config.toml)")
        with stored_settings():  # one a pflkit before a check wrote still loads
            return SimConfig.load(self.config_file)

    @staticmethod
    def commit_metadata(rounds_done: int, config: SimConfig, clip_norm: float | None
                        ) -> dict[str, str]:
        """A global checkpoint's metadata, which :meth:`rounds_done` and its peers read back.

        It records the settings its rounds ran under (:meth:`resumed_config`) and DP's
        ``clip_norm`` for the next round (None: no DP).
        """
        meta = {"rounds_done": str(rounds_done), "algorithm": config.algorithm.name,
                RUN_CONFIG_KEY: config.computed_part().to_toml()}
        return meta | ({CLIP_NORM_KEY: repr(clip_norm)} if clip_norm is not None else {})

    def resumed_config(self) -> SimConfig:
        """The config to continue the run with: ``config.toml``, unless edited since (ConfigError).

        Anyone can edit the file; a run continued from it after an edit (``lr``, ``rounds``, a
        method's parameter) would silently be half one run and half another, so its settings
        must be those its committed rounds recorded, but for where it runs and ``data.root``.
        A checkpoint of a pflkit that recorded none is trusted as before. (A config passed to
        ``Simulation(config, run_dir, resume=True)`` is the caller's choice, and honoured.)
        """
        config = self.config()
        change = self.edited_since_committed(config)
        if change is not None:
            done = self.rounds_done()
            raise ConfigError(f"--resume {self.path}: {self.config_file.name} changed since its "
                              f"{done} committed round{'' if done == 1 else 's'} ran "
                              f"({change}), and a run continues as configured (only "
                              "[execution] and data.root may change): restore it, or start a "
                              "new run")
        return config

    def edited_since_committed(self, config: SimConfig, imports: ImportPolicy = OWN_CONFIG
                               ) -> str | None:
        """Where ``config`` leaves the settings the committed rounds recorded (None: nowhere).

        ``key: old -> new`` (and how many more); None too where nothing was recorded.
        ``imports``: what the recorded settings may name (they are read like ``config``).
        """
        text = read_file_metadata(self.latest).get(RUN_CONFIG_KEY) \
            if self.latest.is_file() else None  # nothing committed: it starts over as configured
        if text is None:
            return None
        with stored_settings():
            before = SimConfig.from_toml(text, f"{self.latest} (its {RUN_CONFIG_KEY})", imports)
        changes = config.computed_part().changes_from(before)
        if not changes:
            return None
        return changes[0] + (f" (and {len(changes) - 1} more)" if len(changes) > 1 else "")

    def rounds_done(self) -> int:
        """The last committed round count (0 before the first commit)."""
        if not self.latest.is_file():
            return 0
        done = checkpoint_round(self.latest)
        if done is None:
            raise CorruptStateError(f"{self.latest} is not a pfl-sim global checkpoint: its "
                                    "metadata has no 'rounds_done'")
        return done

    def clip_norm(self) -> float | None:
        """DP's clip norm for the next round as the last commit stored it (None: none stored)."""
        if not self.latest.is_file():
            return None
        text = read_file_metadata(self.latest).get(CLIP_NORM_KEY)
        return None if text is None else float(text)

    def truncate_metrics(self, rounds_done: int) -> None:
        """Keep the metrics rows of the first ``rounds_done`` rounds (a resumed run's).

        A last line cut short (the process killed or the disk full mid-write) is dropped: its
        round was not committed, or it would not be the last line.
        """
        if not self.metrics.is_file():
            return
        lines = [line for line in self.metrics.read_bytes().splitlines() if line.strip()]
        rows = []
        for number, line in enumerate(lines, 1):
            try:
                row = json.loads(line)  # bytes: a byte that is not UTF-8 is an error too
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                if number < len(lines):
                    why = err.msg if isinstance(err, json.JSONDecodeError) else "not UTF-8"
                    raise CorruptStateError(f"{self.metrics}: line {number} is not JSON "
                                            f"({why})") from None
                continue
            if not (isinstance(row, dict) and type(row.get("round")) is int):  # edited by hand
                raise CorruptStateError(f"{self.metrics}: line {number} is not a round's row "
                                        "(a JSON object with an integer 'round')")
            rows.append(row)
        kept = [r for r in rows if r["round"] < rounds_done]
        self.metrics.write_text("".join(json_text(r) + "\n" for r in kept))

    @phase("metrics")
    def append_metrics(self, row: dict[str, Any]) -> None:
        """Add one round's row to ``metrics.jsonl``."""
        with self.metrics.open("a") as handle:
            handle.write(json_text(row) + "\n")

    def save_partition(self, partition: Partition) -> None:
        """Store the deal (before round 0)."""
        save_state(self.partition_file, partition.to_state())

    def load_partition(self) -> Partition | None:
        """The stored deal, or None for a directory written before it was stored."""
        if not self.partition_file.is_file():
            return None
        return Partition.from_state(load_state(self.partition_file))

    def refuse_another_deal(self, partition: Partition) -> None:
        """A resumed run deals each client id the rows it began with, or is refused.

        The data is dealt again on resume; a dataset changed meanwhile (a user added to a
        folder's users file) moved every later id to another user's rows, silently, while
        pfl-export kept reading the stored deal. Compared in the current stored form, on the
        keys the stored deal has (one stored before a key existed lacks it); a natural deal
        without ``users.draws`` came from an older pflkit, whose draws for a user hung on the
        other users, and the refusal says so.
        """
        if not self.partition_file.is_file():
            return
        stored = load_state(self.partition_file)
        before, now = Partition.from_state(stored).to_state(), partition.to_state()
        older_draws = "users" in stored and "users.draws" not in stored  # before per-user draws
        if older_draws:
            del before["users.draws"]  # to_state writes the marker of the current rule
        if any(k not in now or not torch.equal(v, now[k]) for k, v in before.items()):
            why = ("an older pflkit dealt it, whose draws for a user hung on the other users; "
                   "or did the dataset change?" if older_draws else "did the dataset change?")
            raise ConfigError(f"--resume {self.path}: the data deals the clients other rows "
                              f"than when the run began ({why}), so a client id would continue "
                              "on another user's data or test rows: restore the data, or start "
                              "a new run")
