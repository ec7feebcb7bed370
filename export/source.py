"""Where the weights and the data for an export come from: a run directory or a device folder.

A ``pfl-sim`` run directory (:class:`~pflkit.sdk.rundir.RunDir`) gives the config, the
stored partition (the client's very rows, without re-dealing the dataset; directories written
before it was stored are re-dealt from the seed) and the states. The global state is
``global/round_<r>`` or ``global/latest``; the client state is ``personalized/<id>``
(post-federation stage, valid for the last round only) else the newest ``clients/<id>.r<k>``
written before round r, else the algorithm's fresh ``init_client`` (a client never sampled,
or a new client).

An on-device folder (:class:`~pflkit.sdk.state_store.DeviceStateStore`) plus a global state
file and the run's TOML config: the device's own rows are not on the host, so verification
uses the dataset's test split and calibration its train split (the card says so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pflkit.export import privacy_card
from pflkit.export.contract import ExportError
from pflkit.export.state_shapes import check_tensors
from pflkit.sdk.algorithms.base import Algorithm, ClientState, RoundContext, State
from pflkit.sdk.builder import build_algorithm, load_data, partition_of
from pflkit.sdk.config_types import stored_settings
from pflkit.sdk.data.datasets import DatasetSpec
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.registry import OWN_CONFIG, ImportPolicy
from pflkit.sdk.run_config import ConfigError, SimConfig
from pflkit.sdk.rundir import RunDir
from pflkit.sdk.rundir import checkpoint_round as recorded_round
from pflkit.sdk.state_store import DeviceStateStore, load_client_state
from pflkit.sdk.tensorio import CorruptStateError, load_state, read_file_metadata

CALIBRATION_ROWS = 512  # train rows used for int8 calibration


@dataclass
class Source:
    """Everything an export needs besides the user's choice."""

    algorithm: Algorithm
    spec: DatasetSpec
    global_state: State
    client_state: ClientState
    train: LabeledTensors  # calibration rows (the client's own train data when known)
    test: LabeledTensors  # verification and accuracy rows
    info: dict[str, Any]  # the card's "source"
    dataset: dict[str, Any] = field(default_factory=dict)  # name/root/seed: to reload raw images
    stage: RoundContext | None = None  # the context of the post-federation stage (trainer)
    privacy: dict[str, Any] | None = None  # the card's "privacy" (export/privacy_card.py)
    files: dict[str, str] = field(default_factory=dict)  # "global"/"client": for errors

    @property
    def calibration(self) -> LabeledTensors:
        """At most ``CALIBRATION_ROWS`` train rows."""
        return self.train.subset(torch.arange(min(len(self.train), CALIBRATION_ROWS)))


def _load_config(path: Path, imports: ImportPolicy) -> SimConfig:
    """A run's config as the run stored it (one an older pflkit wrote loads: stored_settings)."""
    if not path.is_file():
        raise ExportError(f"no run configuration at {path}")
    try:
        with stored_settings():
            return SimConfig.load(path, imports=imports)
    except ConfigError as err:  # name the file once, whether or not the message does
        raise ExportError(str(err) if str(path) in str(err) else f"{path}: {err}") from err


def _unedited(run: RunDir, config: SimConfig, imports: ImportPolicy) -> None:
    """Refuse a ``config.toml`` edited since the rounds ran: it would rebuild another model."""
    try:
        change = run.edited_since_committed(config, imports)
    except ConfigError as err:
        raise ExportError(str(err)) from err
    if change is not None:
        raise ExportError(f"{run.config_file} changed since the run's rounds ran ({change}): "
                          "the export would not be the model they trained; restore it")


def checkpoint_round(path: Path) -> int | None:
    """The ``rounds_done`` a global checkpoint records (None: not recorded); checks the file."""
    try:
        return recorded_round(path)
    except CorruptStateError as err:
        raise ExportError(str(err)) from err


def _global_checkpoint(run: RunDir, round_done: int | None, rounds: int
                       ) -> tuple[Path, int, int]:
    """(path, its round, the run's last committed round), of a run of ``rounds`` rounds."""
    if not run.latest.is_file():
        raise ExportError(f"{run} has no committed round (no "
                          f"{run.latest.relative_to(run.path)})")
    last = checkpoint_round(run.latest)
    if last is None:
        raise ExportError(f"{run.latest} is not a pfl-sim global checkpoint: its metadata has no "
                          f"'rounds_done'")
    if last > rounds:  # the card's source.round would claim rounds the run never ran
        raise ExportError(f"{run.latest}: its 'rounds_done' {last} is more than the run's "
                          f"{rounds} rounds ({run.config_file}): not a checkpoint of this run")
    if round_done is None or round_done == last:
        return run.latest, last, last
    path = run.checkpoint(round_done)
    if not path.is_file():
        have = run.checkpoints()
        raise ExportError(f"{run}: no checkpoint of round {round_done}; "
                          f"available: {', '.join(map(str, have)) or 'none'} (latest: {last})")
    return path, round_done, last


def load_run_source(run_dir: Path, client: int | None, round_done: int | None = None,
                    imports: ImportPolicy = OWN_CONFIG) -> Source:
    """Load a run's global state of ``round_done`` (default: the last) and one client.

    ``imports``: the import paths the run's config may name (default: any, the user's own run).
    """
    run = RunDir(run_dir)
    config = _load_config(run.config_file, imports)
    path, round_done, last = _global_checkpoint(run, round_done, config.rounds)
    _unedited(run, config, imports)
    dataset = load_data(config)
    algorithm = build_algorithm(config, dataset.spec)
    partition = run.load_partition() or partition_of(config, dataset)
    info: dict[str, Any] = {"run": str(run), "round": round_done, "client": client,
                            "new_client": False}
    files = {"global": str(path)}
    if client is None:
        state = ClientState()
        trainer = next(c for c in sorted(partition.train) if c not in partition.new_clients)
        train, test = partition.client(dataset, trainer).train, dataset.test
        info["test_data"] = "global test set"
    else:
        if client not in partition.train:
            new = f"; new clients: {sorted(partition.new_clients)}" \
                if partition.new_clients else ""
            raise ExportError(f"unknown client {client}: {run} has clients "
                              f"0..{len(partition.train) - 1}{new}")
        data = partition.client(dataset, client)
        state, client_file = _client_state(run, algorithm, client, round_done, last,
                                           config.seed, data.train)
        if client_file is not None:
            files["client"] = str(client_file)
        info["new_client"] = client in partition.new_clients
        train, test = data.train, data.test
        info["test_data"] = "client test split"
        if len(test) == 0:  # the run kept no per-client test rows (e.g. FedRoD's protocol)
            test = dataset.test
            info["test_data"] = "global test set"
    global_state = load_state(path)
    check_tensors(algorithm, config.seed, global_state, path, state.tensors, files.get("client"))
    population = len(set(partition.train) - set(partition.new_clients))
    privacy = privacy_card.simulated(config.aggregation, config.schedule(), population,
                                     round_done, _shared(algorithm, global_state))
    return Source(algorithm, dataset.spec, global_state, state, train, test, info,
                  {"name": config.data.dataset, "root": config.data.root, "seed": config.seed},
                  _stage(config, round_done, client or 0), privacy, files)


def _shared(algorithm: Algorithm, global_state: State) -> list[str]:
    """The tensors a device uploads (what DP covers)."""
    return list(algorithm.aggregation.update_schema(global_state))


def _stage(config: SimConfig, rounds_done: int, client: int) -> RoundContext:
    """The context the simulator gives a client's post-federation stage after that round."""
    return RoundContext(rounds_done, config.rounds, config.schedule().lr_at(rounds_done),
                        config.seed, client)


def _client_state(run: RunDir, algorithm: Algorithm, client: int, round_done: int, last: int,
                  seed: int, train: LabeledTensors) -> tuple[ClientState, Path | None]:
    """The client's state and the file it came from (None: a fresh ``init_client``)."""
    personalized = run.personalized(client)
    if round_done == last and personalized.is_file():
        return load_client_state(personalized), personalized
    stored = run.clients.load(client, round_done - 1)
    if stored is None:
        return algorithm.training.init_client(client, seed, train), None
    newest = max((r for r in range(round_done) if run.clients.path(client, r).is_file()),
                 default=None)
    return stored, None if newest is None else run.clients.path(client, newest)


def load_device_source(state_dir: Path, global_file: Path, config_file: Path,
                       imports: ImportPolicy = OWN_CONFIG) -> Source:
    """Load an app's state folder, the global state it trained against, the run config."""
    config = _load_config(Path(config_file), imports)
    if not Path(state_dir).is_dir():
        what = "is not a folder" if Path(state_dir).exists() else "does not exist"
        raise ExportError(f"--state-dir {state_dir} {what} (give the app's state folder, which "
                          f"holds {DeviceStateStore.FILE})")
    state = DeviceStateStore(Path(state_dir)).load()
    if state is None:
        raise ExportError(f"{state_dir} holds no client state ({DeviceStateStore.FILE})")
    dataset = load_data(config)
    algorithm = build_algorithm(config, dataset.spec)
    if not Path(global_file).is_file():
        raise ExportError(f"no global state file at {global_file}")
    info = {"state_dir": str(state_dir), "global": str(global_file), "config": str(config_file),
            "round": checkpoint_round(Path(global_file)),
            "client": None, "new_client": False, "test_data": "dataset test split"}
    global_state = load_state(Path(global_file))
    state_file = Path(state_dir) / DeviceStateStore.FILE
    check_tensors(algorithm, config.seed, global_state, global_file, state.tensors, state_file)
    trained = config.data.num_clients - config.data.num_new_clients  # pfl-sim's population
    privacy = privacy_card.of_global_file(
        config.aggregation, config.schedule(), trained, info["round"] or 0,
        read_file_metadata(Path(global_file)), _shared(algorithm, global_state))
    return Source(algorithm, dataset.spec, global_state, state, dataset.train,
                  dataset.test, info,
                  {"name": config.data.dataset, "root": config.data.root, "seed": config.seed},
                  _stage(config, info["round"] or 0, 0), privacy,
                  {"global": str(global_file), "client": str(state_file)})
