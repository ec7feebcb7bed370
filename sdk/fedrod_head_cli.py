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
from pflkit.sdk.algorithms.fedrod_hypernet import CLASS_DISTRIBUTION, head_classes, head_query
from pflkit.sdk.algorithms.state_layout import add_prefix, strip_prefix
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


def check_out(out: Path, source: Path, state_file: Path, force: bool = False) -> None:
    """Refuse an output path that cannot become a file, or must not, before any work is done.

    Never the input checkpoint, the run's own files (``config.toml``, ``final.json`` ...) nor
    inside its state folders (writing there breaks the run); an existing file only with
    ``force``.
    """
    if out.is_dir():
        raise HeadError(f"--out {out} is a folder; give a file name (e.g. {out / 'head'}"
                        ".safetensors)")
    if out.parent.exists() and not out.parent.is_dir():
        raise HeadError(f"--out {out}: {out.parent} is not a folder")
    target = out.resolve()
    if target == state_file.resolve():
        raise HeadError(f"--out {out} is the global state it reads: choose another file")
    run = RunDir(source if source.is_dir() else state_file.parent.parent)  # RUN/global/x
    for file in run.own_files():
        if target == file.resolve():
            raise HeadError(f"--out {out} is the run's {file.name}: choose a file outside "
                            f"the run's own files")
    for folder in run.own_folders():
        if folder.resolve() in target.parents:
            raise HeadError(f"--out {out} lies inside {folder}, the run's state: choose a file "
                            f"outside it")
    if out.exists() and not force:
        raise HeadError(f"--out {out} already exists; use --force to replace it")


def check_shapes(state: State, path: Path) -> None:
    """The hypernetwork's shapes against the head's, so a damaged file is blamed, not the user.

    fc1 maps the class distribution (one entry per class of the head) to the hidden layer,
    fc2 the hidden layer to every parameter of the head.
    """
    head = strip_prefix(state, "head.")
    fc1, fc2 = state.get(f"{HYPER}fc1.weight"), state.get(f"{HYPER}fc2.weight")
    if not any(k.endswith("weight") for k in head) or fc1 is None or fc2 is None \
            or fc1.dim() != 2:
        raise HeadError(f"{path}: not a fedrod_hyper global state (needs head.* and "
                        f"{HYPER}fc1.weight / {HYPER}fc2.weight)")
    hidden, classes = int(fc1.shape[0]), head_classes(head)
    expected = {f"{HYPER}fc1.weight": (hidden, classes),
                f"{HYPER}fc2.weight": (sum(v.numel() for v in head.values()), hidden)}
    for name, want in expected.items():
        if tuple(state[name].shape) != want:
            raise HeadError(f"{path}: tensor '{name}' has shape {tuple(state[name].shape)}, "
                            f"the model's is {want}")


def global_state_path(source: Path, round_index: int | None = None) -> Path:
    """Find the global state file: ``source`` itself, or a run directory's latest / round_N."""
    if source.is_file():
        if round_index is not None:
            raise HeadError("--round applies to a run directory, not to a state file")
        return source
    if not source.is_dir():
        raise HeadError(f"{source} is not a state file nor a run directory" if source.exists()
                        else f"{source} does not exist")
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
    try:
        a = class_proportions(distribution, num_classes)
    except ClassDistributionError as err:  # the length: name the option, not a tensor shape
        raise HeadError(f"{'--proportions' if proportions else '--class-counts'}: {err}") from err
    phi = head_query(state, {CLASS_DISTRIBUTION.name: a.tolist()})
    meta = {"class_proportions": a.tolist(), "zero_shot": True}
    if not proportions:
        meta[COUNTS] = [int(v) for v in distribution]
    return ClientState(add_prefix(phi, PHI), meta)


@app.command()
def main(
    source: Annotated[Path, typer.Argument(help="pfl-sim run directory or global .safetensors")],
    out: Annotated[Path, typer.Option(help="where to write the head (.safetensors)")],
    class_counts: Annotated[str | None, typer.Option(
        help="samples per class, whole numbers >= 0, one per class (e.g. 5,0,12,...)")] = None,
    proportions: Annotated[str | None, typer.Option(
        help="class shares in [0, 1] summing to 1, one per class")] = None,
    round_index: Annotated[int | None, typer.Option(
        "--round", help="a checkpointed round of the run directory (default: the last)")] = None,
    force: Annotated[bool, typer.Option(help="replace an existing --out file")] = False,
) -> None:
    """Write the zero-shot personalized head for one class distribution (deprecated)."""
    typer.echo(DEPRECATED, err=True)
    try:
        if (class_counts is None) == (proportions is None):
            raise HeadError("give exactly one of --class-counts or --proportions")
        path = global_state_path(source, round_index)
        check_out(out, source, path, force)
        text = class_counts if class_counts is not None else proportions
        values = CLASS_DISTRIBUTION.parse(text or "", "counts" if proportions is None
                                          else "proportions")
        assert isinstance(values, tuple)
        state = load_state(path)
        if any(k.startswith(HYPER) for k in state):
            check_shapes(state, path)
        head = make_head(state, values, proportions is not None)
        head.meta["source"] = str(path)
        try:
            atomic_write_bytes(out, client_state_to_bytes(head))
        except OSError as err:
            raise HeadError(f"cannot write --out {out}: {err.strerror or err}") from err
    except (HeadError, ClassDistributionError, CorruptStateError, ValueError,
            RuntimeError) as err:  # RuntimeError: torch on tensors this check cannot foresee
        typer.echo(f"error: {' '.join(str(err).split())}", err=True)  # as every pfl-* says
        raise typer.Exit(2) from err
    shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in head.tensors.items())
    typer.echo(f"wrote {out}: {shapes}")


script = entry_point(app, "pfl-fedrod-head")  # the console script: usage errors in one line
