"""What clients ask for between uploads: their task, global states, algorithm queries.

Tasks and downloads need no PyTorch (the run's terms and the blob bytes). An algorithm query
(e.g. FedRoD's zero-shot head for a class distribution) computes on the global state: the
process imports PyTorch on the first one.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from pflkit.sdk.protocol import CLIP_NORM_KEY, MAX_NUM_SAMPLES_KEY
from pflkit.sdk.secagg.wire import TASK_KEY, task_setup
from pflkit.server.errors import Invalid, NotFound
from pflkit.server.orm import Round, Run, SecAggMessage, Update
from pflkit.server.secagg_rounds import SecAggRounds
from pflkit.server.store import Recent, Store

KNOWN_GLOBALS = 64  # global states remembered as named by a run or round, per worker


class Tasks:
    """Task polling, global-state downloads and algorithm queries."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # global states known to be named by a run or round: each is looked up in the database
        # once per process, not per download (a pruned one's read is then a 404: store.py)
        self._known_globals: Recent[str, bool] = Recent(KNOWN_GLOBALS)

    def task(self, client_id: int) -> dict[str, Any]:
        """Tell a client what to do now: train (with everything it needs), wait, or stop.

        A finished run also sends its config, so clients can run the algorithm's
        post-federation stage (``personalize``) on the final global state.
        """
        retry = 2 * self.store.settings.tick_seconds
        with self.store.transaction() as s:
            run = self.store.current_run(s)
            if run is None:
                return {"status": "wait", "retry_after": retry}
            terms = self.store.terms(s, run)
            config = terms.task  # the same every round
            # "round" is the run's current round whatever the status: a client holding a
            # trained round keeps it until the run has moved past it (a pause does not)
            base = {"run_id": run.id, "round": run.rounds_done, "retry_after": retry,
                    "global_hash": run.global_hash}
            if run.status == "finished":
                return {**base, "status": "finished", "config": config}
            if run.status != "active":
                return {**base, "status": run.status}
            rnd = self.store.round_of(s, run, run.rounds_done)
            if rnd is None or rnd.status != "open" or client_id not in rnd.sampled:
                return {**base, "status": "wait"}
            # a SecAgg device that sent anything is in the protocol (one restarted dropped out)
            sent = s.scalar(select(Update.id).where(Update.round_id == rnd.id,
                                                    Update.client_id == client_id)) or \
                s.scalar(select(SecAggMessage.id).where(SecAggMessage.round_id == rnd.id,
                                                        SecAggMessage.client_id == client_id))
            extra: dict[str, Any] = {} if terms.device_clip_norm is None else \
                {CLIP_NORM_KEY: terms.device_clip_norm}
            if terms.secagg is not None:
                extra[TASK_KEY] = task_setup(terms.secagg, SecAggRounds.setup(rnd, terms))
            # the most an update may weigh: a device with more rows reports this many, instead
            # of an upload refused (422) at every re-send until the round closes
            return {**base, "status": "uploaded" if sent is not None else "train",
                    "deadline": rnd.deadline_at, "global_hash": rnd.global_hash,
                    "config": config, **extra,
                    MAX_NUM_SAMPLES_KEY: self.store.settings.max_num_samples}

    def preview(self) -> dict[str, Any]:
        """The newest run's task config, for a device to check before it enrolls.

        None when there is no run, or it was stopped: there is nothing to join (yet).
        """
        with self.store.transaction() as s:
            run = self.store.current_run(s)
            if run is None or run.status == "stopped":
                return {"run_id": None, "config": None}
            return {"run_id": run.id,
                    "config": self.store.terms(s, run).task}

    def check_global(self, digest: str) -> None:
        """Raise NotFound unless some run or round names this global state and it is stored."""
        self._known_globals.get(digest, self._named_and_stored)

    def _named_and_stored(self, digest: str) -> bool:
        with self.store.transaction() as s:
            known = s.scalar(select(Run.id).where(Run.global_hash == digest).limit(1)) or \
                s.scalar(select(Round.id).where(Round.global_hash == digest).limit(1))
        if known is None or not self.store.blobs.exists(digest):
            raise NotFound(f"no global state {digest}")
        return True

    def global_blob(self, digest: str) -> bytes:
        """Return a global state's bytes (never another client's update: see check_global).

        The newest two are kept in memory: every sampled client downloads the same state at
        the start of a round, and one shared ``bytes`` object serves all those responses.
        """
        self.check_global(digest)
        return self.store.global_bytes.get(digest)

    def query(self, run_id: int, name: str, body: Any) -> bytes:
        """Answer an algorithm query (``ServerAggregation.queries``) on the run's newest global.

        The answer is safetensors whose metadata names the global state it was computed from.
        """
        from pflkit.sdk.tensorio import state_to_bytes

        with self.store.transaction() as s:
            run = self.store.get_run(s, run_id)
            digest = run.global_hash
            setup = self.store.setup(run)
        queries = setup.algorithm.aggregation.queries()
        if name not in queries:
            offered = ", ".join(sorted(queries)) or "none"
            raise NotFound(f"run {run_id} ({setup.config.algorithm.name}) answers no query "
                           f"'{name}'; it answers: {offered}")
        try:
            answer = queries[name](self.store.global_states.get(digest), body)
        except ValueError as err:
            raise Invalid(f"query '{name}': {err}") from err
        return state_to_bytes(answer, {"global_hash": digest})
