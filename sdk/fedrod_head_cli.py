"""``pfl-fedrod-head`` (deprecated, kept for one release): the server's ``head`` query, offline.

Reads a FedRoD-hyper global state (a ``pfl-sim`` run directory or a ``.safetensors`` file),
answers FedRoD's ``head`` query on it (:func:`~pflkit.sdk.algorithms.fedrod_hypernet.head_query`,
the server's code) for the choice ``class_distribution`` and writes phi as a safetensors
client-state file (tensors ``phi.<name>``, metadata: the proportions and the source). That file
is a valid FedRoD client state: ``personalized_model(global, state)`` gives the client's model.
Use ``pfl-export --choice class_distribution=...`` for the model itself, or the server's query.

    pfl-fedrod-head runs/fedrod --class-counts 5,0,12,3,0,0,7,1,0,2 --out head.safetensors
    pfl-fedrod-head global.safetensors --proportions 0.5,0.5,0,0,0,0,0,0,0,0 --out head.safetensors
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from pflkit.sdk.algorithms.base import ClientState, State
from pflkit.sdk.algorithms.fedrod import COUNTS, HYPER, PHI
from pflkit.sdk.algorithms.fedrod_hypernet import CLASS_DISTRIBUTION, head_query
from pflkit.sdk.algorithms.state_layout import add_prefix
from pflkit.sdk.class_distribution import ClassDistributionError, class_proportions
from pflkit.sdk.console import entry_point
from pflkit.sdk.rundir import RunDir
from pflkit.sdk.state_store import client_state_to_bytes
from pflkit.sdk.tensorio import CorruptStateError, atomic_write_bytes, load_state

app = typer.Typer(add_completion=False, help=__doc__)
DEPRECATED = ("pfl-fedrod-head is deprecated and goes in the next release: use pfl-export "
              "--choice class_distribution=... or the server's head query")


class HeadError(ValueError):
    """The inputs do not allow a zero-shot head (message says which and why)."""


def check_out(out: Path) -> None:
    """Refuse an output path that cannot become a file before any work is done."""
    if out.is_dir():
        raise HeadError(f"--out {out} is a folder; give a file name (e.g. {out / 'head'}"
                        ".safetensors)")
    if out.parent.exists() and not out.parent.is_dir():
        raise HeadError(f"--out {out}: {out.parent} is not a folder")


def global_state_path(source: Path, round_index: int | None = None) -> Path:
    """Find the global state file: ``source`` itself, or a run directory's latest / round_N."""
    if source.is_file():
        if round_index is not None:
            raise HeadError("--round applies to a run directory, not to a state file")
        return source
    if not source.is_dir():
        raise HeadError(f"{source} does not exist")
    run = RunDir(source)
    path = run.latest if round_index is None else run.checkpoint(round_index)
    if not path.is_file():
        raise HeadError(f"{source} has no {path.relative_to(source)} (is it a pfl-sim run "
                        "directory, and was that round checkpointed?)")
    return path


def make_head(state: State, distribution: tuple[float, ...], proportions: bool) -> ClientState:
    """Return the zero-shot head of a parsed distribution as a FedRoD client state."""
    if not any(k.startswith(HYPER) for k in state):
        raise HeadError("this global state has no hypernetwork (hyper.* tensors): zero-shot "
                        "heads need a fedrod_hyper run (fedrod_linear's is the zero head)")
    num_classes = int(state[f"{HYPER}fc1.weight"].shape[1])
    a = class_proportions(distribution, num_classes)
    phi = head_query(state, {CLASS_DISTRIBUTION.name: a.tolist()})
    meta = {"class_proportions": a.tolist(), "zero_shot": True}
    if not proportions:
        meta[COUNTS] = [int(v) for v in distribution]
    return ClientState(add_prefix(phi, PHI), meta)


@app.command()
def main(
    source: Annotated[Path, typer.Argument(help="pfl-sim run directory or global .safetensors")],
    out: Annotated[Path, typer.Option(help="where to write the head (.safetensors)")],
    class_counts: Annotated[str | None, typer.Option(help="samples per class, e.g. 5,0,12")] = None,
    proportions: Annotated[str | None, typer.Option(help="class shares summing to 1")] = None,
    round_index: Annotated[int | None, typer.Option("--round", help="checkpoint round")] = None,
) -> None:
    """Write the zero-shot personalized head for one class distribution (deprecated)."""
    typer.echo(DEPRECATED, err=True)
    try:
        if (class_counts is None) == (proportions is None):
            raise HeadError("give exactly one of --class-counts or --proportions")
        check_out(out)
        path = global_state_path(source, round_index)
        text = class_counts if class_counts is not None else proportions
        values = CLASS_DISTRIBUTION.parse(text or "", "counts" if proportions is None
                                          else "proportions")
        assert isinstance(values, tuple)
        head = make_head(load_state(path), values, proportions is not None)
        head.meta["source"] = str(path)
        try:
            atomic_write_bytes(out, client_state_to_bytes(head))
        except OSError as err:
            raise HeadError(f"cannot write --out {out}: {err.strerror or err}") from err
    except (HeadError, ClassDistributionError, CorruptStateError, ValueError) as err:
        typer.echo(f"Error: {err}", err=True)
        raise typer.Exit(2) from err
    shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in head.tensors.items())
    typer.echo(f"wrote {out}: {shapes}")


script = entry_point(app, "pfl-fedrod-head")  # the console script: usage errors in one line
