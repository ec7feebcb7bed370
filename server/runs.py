"""Runs: create one from a pfl-sim TOML config, pause, resume, stop, report progress.

Creating a run resolves its config to an algorithm and builds the initial global state
(PyTorch: in a child process when the caller is an HTTP worker, which stays without it), then
stores the run's :class:`~pflkit.server.store.RunTerms`, from which workers serve tasks and
check uploads without PyTorch.
"""

from __future__ import annotations

import logging
import multiprocessing
import secrets
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from pflkit.sdk.aggregation_config import AggregationConfig
from pflkit.sdk.config_toml import dump_toml, parse_toml
from pflkit.sdk.registry import ImportPolicy
from pflkit.server.blobs import BlobStore
from pflkit.server.errors import Conflict, Invalid
from pflkit.server.orm import Client, Round, Run, RunTermsRow, Update
from pflkit.server.privacy_status import privacy_status, run_aggregation
from pflkit.server.settings import ServerSettings
from pflkit.server.store import RunTerms, Store
from pflkit.server.update_check import SAFETENSORS_DTYPES, schema_bytes

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from pflkit.sdk.algorithms.base import Algorithm, State
    from pflkit.sdk.data.spec import DatasetSpec
    from pflkit.sdk.run_config import Schedule, SimConfig

log = logging.getLogger(__name__)

LIVE = ("active", "paused")  # run statuses that block creating another run
TRANSITIONS = {"pause": (("active",), "paused"), "resume": (("paused",), "active"),
               "stop": (LIVE, "stopped")}  # action -> (from, to)


@dataclass(frozen=True)
class RunSetup:
    """What a run's TOML config resolves to (built once per process and run)."""

    config: SimConfig
    algorithm: Algorithm
    schedule: Schedule
    spec: DatasetSpec  # the dataset's shapes and classes (its data is never read)
    aggregation: AggregationConfig  # the config's [aggregation], at least the server's floor

    @property
    def hidden_seed(self) -> int:
        """The seed of each round's sample and DP noise (a DP run's is a server secret)."""
        return self.aggregation.hidden_seed(self.config.seed)


@dataclass(frozen=True)
class RunRules:
    """What the operator's settings make of a run config (picklable: it goes to a child)."""

    clients_per_round: int | None = None  # the server's override of the config's sample size
    imports: ImportPolicy = ImportPolicy()  # the import paths a config may name
    dataset_dir: Path | None = None  # [data] root must lie in it (None: no root allowed)
    max_upload_bytes: int | None = None  # an update must fit in an upload (None: unchecked)
    aggregation: AggregationConfig = AggregationConfig()  # the operator's floor
    min_enrolled: int | None = None  # no round opens with fewer enrolled clients

    @classmethod
    def of(cls, settings: ServerSettings) -> RunRules:
        """The rules of this server."""
        return cls(settings.clients_per_round, settings.imports, settings.dataset_dir,
                   settings.max_upload_bytes, settings.aggregation_floor, settings.min_enrolled)

    def smallest_roster(self, setup: RunSetup) -> int:
        """The fewest clients a round opens with (RoundKeeper's rule): the round to check.

        Adaptive clipping's default count noise (m / 20) is smallest there, a calibrated z
        largest (SecAgg takes neither); the roster itself is known only when a round opens.
        """
        return max(setup.schedule.sampling.clients_per_round or 1, self.min_enrolled or 1)

    def check_update_size(self, terms: RunTerms) -> None:
        """Refuse a run whose updates no device could upload (a 413 for every device)."""
        size, limit = schema_bytes(terms.schema), self.max_upload_bytes
        if limit is not None and size > limit:
            raise Invalid(f"run config: an update of this model holds {size} bytes of tensors, "
                          f"more than max_upload_bytes ({limit}): raise --max-upload-bytes "
                          "(PFL_SERVER_MAX_UPLOAD_BYTES) or use a smaller model")

    def data_root(self, root: str | None) -> Path | None:
        """``[data] root`` as a folder inside ``dataset_dir`` (relative roots start there).

        The refusal says nothing about the server's files: whether the path exists is not
        told to the admin who wrote it.
        """
        if root is None:
            return None
        where = "the server's dataset_dir (--dataset-dir, PFL_SERVER_DATASET_DIR)"
        if self.dataset_dir is None:
            raise Invalid(f"run config: data.root: this server reads no dataset files: set {where}")
        base = self.dataset_dir.resolve()
        try:
            path = (base / root).resolve()
        except (OSError, RuntimeError):  # a symbolic link loop
            path = None
        if path is None or not path.is_relative_to(base):
            raise Invalid(f"run config: data.root: {root!r} is not inside {where}")
        return path


@contextmanager
def refused_as_invalid() -> Iterator[None]:
    """A run config that cannot be built is the admin's 422 line (its traceback: the log)."""
    from pflkit.sdk.registry import ExtensionError
    from pflkit.sdk.run_config import ConfigError

    try:
        yield
    except Invalid:
        raise
    except (ConfigError, ExtensionError, KeyError, ValueError, OSError) as err:
        raise Invalid(f"run config: {err}") from err
    except Exception as err:  # the allowed packages' own code, whatever it raises
        log.exception("building a run config failed")
        raise Invalid(f"run config: building the run failed ({type(err).__name__}: "
                      f"{' '.join(str(err).split())})") from err


def build_setup(config_toml: str, rules: RunRules) -> RunSetup:
    """Resolve a pfl-sim TOML into algorithm and schedule, imports and files as ``rules`` allow."""
    from pflkit.sdk.builder import build_algorithm, data_spec
    from pflkit.sdk.run_config import Sampling, SimConfig

    with refused_as_invalid():
        config = SimConfig.from_toml(config_toml, "config_toml", rules.imports)
        spec = data_spec(config, rules.data_root(config.data.root))
        algorithm = build_algorithm(config, spec)
        aggregation = config.aggregation.at_least(rules.aggregation)
    schedule = config.schedule()
    if rules.clients_per_round is not None:
        schedule = replace(schedule, sampling=Sampling(clients_per_round=rules.clients_per_round))
    return RunSetup(config, algorithm, schedule, spec, aggregation)


def terms_of(setup: RunSetup, global_state: State) -> RunTerms:
    """The run's terms: the task config (learning-rate schedule included), update schema."""
    from pflkit.sdk.task_config import TaskConfig

    cfg = setup.config
    task = TaskConfig.of(cfg, setup.spec).to_wire()
    expected = setup.algorithm.aggregation.update_schema(global_state)
    schema = {name: (list(shape), SAFETENSORS_DTYPES[str(dtype).removeprefix("torch.")])
              for name, (shape, dtype) in expected.items()}
    dp = setup.aggregation  # the keeper's rules: the devices clip to what it checks
    secagg = {k: getattr(dp, k) for k in ("secagg_threshold", "secagg_neighbours",
                                          "secagg_clip_range", "dp_clip_norm",
                                          "dp_noise_multiplier")} if dp.secagg else None
    return RunTerms(cfg.algorithm.name, cfg.model.name, task, schema,
                    dp.dp_clip_norm if dp.dp_clip_on_device else None, secagg)


def with_secret_dp_seed(config_toml: str) -> str:
    """The run config with a secret ``[aggregation] dp_seed`` (what its sample and noise use).

    The run seed is in every task a device gets; noise drawn from it could be subtracted, and
    the sample recomputed, by any device. The secret stays in the server's database: no
    answer of the API shows a run's config.
    """
    raw = parse_toml(config_toml, "config_toml")
    raw.setdefault("aggregation", {})["dp_seed"] = secrets.randbits(63)
    return dump_toml(raw)


def prepare_run(config_toml: str, blob_dir: Path, rules: RunRules
                ) -> tuple[str, int, RunTerms, str]:
    """Build a run's initial global state into the blob store: its hash, the rounds, terms.

    And the config to store: a DP run's with its secret ``dp_seed`` (with_secret_dp_seed).
    """
    from pflkit.sdk.aggregation_rules import refuse_unfit_rules
    from pflkit.sdk.tensorio import state_to_bytes
    from pflkit.server.secagg_rounds import refuse_unfit_secagg

    setup = build_setup(config_toml, rules)
    if setup.aggregation.private and setup.aggregation.dp_seed is None:
        config_toml = with_secret_dp_seed(config_toml)  # devices get the run seed: not this
        setup = build_setup(config_toml, rules)
    with refused_as_invalid():  # builds the model; clipping as the operator's floor sets it
        state = setup.algorithm.aggregation.init_global(setup.config.seed)
        refuse_unfit_rules(setup.aggregation, setup.algorithm.aggregation, state, setup.schedule,
                           rules.smallest_roster(setup))
    terms = terms_of(setup, state)
    refuse_unfit_secagg(terms, setup.schedule.sampling.clients_per_round)
    rules.check_update_size(terms)
    digest = BlobStore(blob_dir).put(state_to_bytes(state, {"rounds_done": "0"}))
    return digest, setup.config.rounds, terms, config_toml


def refuse_while_live(s: Session) -> None:
    """One run at a time: Conflict while another is active or paused."""
    live = s.scalar(select(Run).where(Run.status.in_(LIVE)))
    if live is not None:
        raise Conflict(f"run {live.id} is {live.status}; stop it before creating another")


class Runs:
    """Run lifecycle and progress."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def create(self, config_toml: str) -> Run:
        """Start a run from a pfl-sim TOML config (refused while another is active or paused).

        Building the initial global state needs PyTorch: a process without it (an HTTP
        worker) does that in a short-lived child process instead of importing it for good.
        """
        with self.store.transaction() as s:  # not seconds of building before a 409
            refuse_while_live(s)
        args = (config_toml, self.store.settings.blobs, RunRules.of(self.store.settings))
        if "torch" in sys.modules:
            digest, rounds, terms, config_toml = prepare_run(*args)
        else:
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                prepared = pool.submit(prepare_run, *args).result()
            digest, rounds, terms, config_toml = prepared
        with self.store.transaction() as s:
            refuse_while_live(s)  # again: another create may have committed meanwhile
            run = Run(config_toml=config_toml, status="active", rounds_total=rounds,
                      rounds_done=0, global_hash=digest)
            s.add(run)
            s.flush()
            s.add(RunTermsRow(run_id=run.id, terms=terms.to_json()))
        log.info("created run %d (%s, %d rounds)", run.id, terms.algorithm, rounds)
        return run

    def ensure(self, config_toml: str | None = None) -> None:
        """Create a run if the database has none: ``config_toml``, else the run_config file's."""
        if config_toml is None and self.store.settings.run_config is None:
            return
        with self.store.transaction() as s:
            if (run := self.store.current_run(s)) is not None:  # a restart: the file waits
                log.info("run_config not started: the database holds run %d (%s); "
                         "POST /v1/runs (pfl-admin runs create) starts a new run", run.id,
                         run.status)
                return
        self.create(config_toml or self.store.settings.run_config_toml())

    def transition(self, run_id: int, action: str) -> None:
        """Pause, resume or stop a run (see TRANSITIONS)."""
        allowed, target = TRANSITIONS[action]
        with self.store.transaction() as s:
            run = self.store.get_run(s, run_id)
            if run.status not in allowed:
                raise Conflict(f"cannot {action} run {run.id}: it is {run.status}")
            run.status = target
            rnd = self.store.round_of(s, run, run.rounds_done)
            if rnd is not None and rnd.status == "open":
                if action == "stop":
                    rnd.status = "abandoned"
                elif action == "resume":  # the paused time does not count against the clients
                    rnd.deadline_at = time.time() + self.store.settings.round_deadline

    def status(self, run_id: int | None) -> dict[str, Any]:
        """Progress of a run: status, rounds, the open round's participants, per-round metrics."""
        with self.store.transaction() as s:
            run = self.store.get_run(s, run_id)
            terms = self.store.terms(s, run)
            rounds = s.scalars(select(Round).where(Round.run_id == run.id)
                               .order_by(Round.index)).all()
            current = None
            for rnd in rounds:
                if rnd.status in ("open", "closing"):
                    senders = s.scalars(select(Update.client_id)
                                        .where(Update.round_id == rnd.id)).all()
                    current = {"index": rnd.index, "status": rnd.status, "sampled": rnd.sampled,
                               "received": sorted(senders), "deadline": rnd.deadline_at}
            history = [{"index": r.index, "closed_at": r.closed_at, "global_hash": r.result_hash,
                        "metrics": r.metrics} for r in rounds if r.status == "closed"]
            why = [r.metrics["stopped"] for r in rounds if r.status == "abandoned"
                   and isinstance(r.metrics, dict) and "stopped" in r.metrics]
            enrolled = s.scalar(select(func.count(Client.id))
                                .where(Client.revoked_at.is_(None))) or 0
            rules = run_aggregation(run.config_toml, self.store.settings.aggregation_floor)
            return {"id": run.id, "status": run.status, "algorithm": terms.algorithm,
                    "model": terms.model, "rounds_total": run.rounds_total,
                    "rounds_done": run.rounds_done, "global_hash": run.global_hash,
                    "enrolled_clients": enrolled, "current_round": current, "history": history,
                    "privacy": privacy_status(rules, history),
                    "stopped_reason": why[-1] if why else None}
