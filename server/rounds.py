"""Rounds: open the first one, close each at quorum or deadline, open the next.

The round keeper runs in one process per machine (``pfl-server serve`` runs it in a thread
of the process that supervises the HTTP workers; see ``ticker.py``), and several keepers
(replicas) coordinate through the database:

* A round row holds its roster, its sample (drawn by :meth:`Coordinator.sample`, seeded), the
  hash of the global state it starts from, its deadline and the count of accepted updates.
* A round closes at quorum or deadline: one keeper claims it (``open -> closing``, a
  compare-and-set), rebuilds a Coordinator from the round row and re-folds the accepted blobs
  in client-id order with ``submit`` / ``close_round``. The new global state is written as a
  blob, then one commit closes the round and opens the next. A crash anywhere leaves either
  the old commit (the close is redone from the same blobs, on restart) or the new one, so no
  acknowledged update is lost or counted twice, and the fold order (client id) makes the
  result equal to the simulator's for the same clients. A close that raises gives its claim
  back at once; a keeper that died holding one loses it after ``CLOSING_LEASE``. A close whose
  aggregate has NaN or Inf (``GlobalDiverged``) is not retried: the same blobs would give it
  again, so the run stops, the round is abandoned with the reason, and the last finite global
  state stays the run's.

This is the part of the server that computes with tensors (PyTorch).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pflkit.sdk.aggregation_rules import AggregatorFactory
from pflkit.sdk.privacy_accounting import PrivacyBudgetExceeded, dp_rounds, privacy_spent
from pflkit.sdk.tensorio import CorruptStateError, load_state, state_to_bytes
from pflkit.server.coordinator import (
    Coordinator,
    GlobalDiverged,
    UpdateRejected,
    refuse_non_finite_global,
)
from pflkit.server.faults import crash_point
from pflkit.server.orm import Client, Round, Run, RunClipNorm, Update
from pflkit.server.privacy_status import server_metadata
from pflkit.server.round_metrics import recorded_noise, round_metrics
from pflkit.server.secagg_close import secagg_global
from pflkit.server.secagg_rounds import SecAggRounds
from pflkit.server.store import Store

if TYPE_CHECKING:
    from pflkit.server.runs import RunSetup

log = logging.getLogger(__name__)

CLOSING_LEASE = 300.0  # seconds after which another keeper may retake a stuck close


class RoundKeeper:
    """Opens and closes the rounds of the current run."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _coordinator(self, run: Run, rnd: Round) -> tuple[Coordinator, AggregatorFactory]:
        """The round's Coordinator, with the run's aggregation rules, at least the server's.

        And its aggregator factory, which starts from the run's stored DP clip norm.
        """
        setup, s = self.store.setup(run), self.store.settings
        with self.store.transaction() as db:
            stored = db.get(RunClipNorm, run.id)
            earlier = self._earlier_rounds(db, rnd.run_id, rnd.index) \
                if setup.aggregation.private else []
        factory = AggregatorFactory(setup.algorithm.aggregation.new_aggregator,
                                    setup.aggregation,
                                    s.data_dir / "scratch", setup.schedule, setup.hidden_seed,
                                    None if stored is None else stored.clip_norm,
                                    [(setup.schedule.sample_size(n), n) for n, _ in earlier],
                                    [z for _, z in earlier])
        return Coordinator(setup.algorithm, setup.schedule, rnd.roster,
                           self.store.global_states.get(rnd.global_hash), setup.hidden_seed,
                           rnd.index, aggregator_factory=factory), factory

    @staticmethod
    def _earlier_rounds(db: Session, run_id: int, index: int) -> list[tuple[int, float | None]]:
        """Each earlier round's roster size and recorded noise multiplier (or None), oldest first.

        Clients enroll and are revoked during a run, so DP accounts each round at its own
        population (all at the newest one's understated epsilon: 20 then 1000 clients), and
        at the noise it was given (:func:`~pflkit.sdk.privacy_accounting.dp_rounds`).
        """
        rows = db.execute(select(func.json_array_length(Round.roster), Round.metrics).where(
            Round.run_id == run_id, Round.index < index).order_by(Round.index))
        return [(int(n), recorded_noise(metrics)) for n, metrics in rows]

    def recover(self) -> int:
        """After a crash: rounds left ``closing`` are reopened (their close is redone)."""
        with self.store.transaction() as s:
            result = s.execute(update(Round).where(Round.status == "closing")
                               .values(status="open", claimed_at=None))
            return int(result.rowcount or 0)  # type: ignore[attr-defined]

    def tick(self) -> None:
        """Open the first round when enough clients enrolled; close rounds at quorum/deadline."""
        try:
            round_id = self._claim_due_round()
        except IntegrityError:  # another keeper opened the same round first
            return
        if round_id is not None:
            self.close_round(round_id)

    def _claim_due_round(self) -> int | None:
        now = time.time()
        with self.store.transaction() as s:
            run = self.store.current_run(s)
            if run is None or run.status != "active":
                return None
            rnd = self.store.round_of(s, run, run.rounds_done)
            if rnd is None:
                if run.rounds_done < run.rounds_total:
                    self._open_round(s, run)
                return None
            stuck = rnd.status == "closing" and (rnd.claimed_at or 0) < now - CLOSING_LEASE
            if rnd.status == "open" and self.store.terms(s, run).secagg is not None:
                due = SecAggRounds(self.store).due(s, rnd, now)  # its steps have deadlines
            elif rnd.status == "open":
                due = rnd.received >= self.store.quorum(s, rnd) or now >= rnd.deadline_at
            else:
                due = stuck
            if not due:
                return None
            same = [Round.id == rnd.id, Round.status == rnd.status]
            if stuck:  # retake only the claim we saw, not a fresh one
                same.append(Round.claimed_at == rnd.claimed_at)
            claim = s.execute(update(Round).where(*same).values(status="closing", claimed_at=now))
            return rnd.id if claim.rowcount else None  # type: ignore[attr-defined]

    def _open_round(self, s: Session, run: Run) -> Round | None:
        setup = self.store.setup(run)
        roster = sorted(s.scalars(select(Client.id).where(Client.revoked_at.is_(None))))
        needed = max(setup.schedule.sampling.clients_per_round or 1,
                     self.store.settings.min_enrolled or 1)
        if len(roster) < needed or (setup.aggregation.secagg
                                    and setup.schedule.sample_size(len(roster)) < 2):
            return None  # SecAgg masks between two devices at least
        index = run.rounds_done
        if not self._within_budget(s, run, setup, index, len(roster)):
            return None
        coord = Coordinator(setup.algorithm, setup.schedule, roster,
                            self.store.global_states.get(run.global_hash), setup.hidden_seed,
                            index)
        rnd = Round(run_id=run.id, index=index, status="open", roster=roster,
                    sampled=coord.sample(index), global_hash=run.global_hash,
                    deadline_at=time.time() + self.store.settings.round_deadline, metrics={})
        s.add(rnd)
        s.flush()
        log.info("run %d: round %d open, sampled %s", run.id, index, rnd.sampled)
        return rnd

    def _within_budget(self, s: Session, run: Run, setup: RunSetup, index: int,
                       population: int) -> bool:
        """Whether round ``index`` may open: False (the run finished) past ``dp_max_epsilon``.

        Checked before devices get the round, as pfl-sim checks before it trains one: the
        round would otherwise be trained and uploaded and its close refused at every tick.
        A DP setting this roster cannot take (a clipped count's noise too small for z) is a
        ValueError here, before any device trains.
        """
        rules = setup.aggregation
        if rules.dp_max_epsilon is None and rules.dp_adaptive_quantile is None:
            return True  # nothing to check: no accounting (and no calibration) in this commit
        earlier = self._earlier_rounds(s, run.id, index)
        size = setup.schedule.sample_size
        dp = dp_rounds(rules, population, size(population), setup.schedule.rounds,
                       [(size(n), n) for n, _ in earlier], [z for _, z in earlier])
        try:
            if dp is not None:
                dp.check_budget(index)
        except PrivacyBudgetExceeded as err:
            log.warning("run %d: finished after %d rounds: %s", run.id, index, err)
            run.status = "finished"
            return False
        return True

    def close_round(self, round_id: int) -> None:
        """Fold the round's accepted blobs (client-id order), store the result, commit.

        A close that raises (a blob missing, the disk full, the database gone) gives its
        claim back at once, so the next tick of any keeper retries it, instead of the round
        staying ``closing`` until the lease expires.
        """
        with self.store.transaction() as s:
            rnd = s.get(Round, round_id)
            assert rnd is not None
            run = s.get(Run, rnd.run_id)
            assert run is not None
            updates = s.scalars(select(Update).where(Update.round_id == round_id)
                                .order_by(Update.client_id)).all()
        try:
            self._close_claimed(run, rnd, list(updates))
        except GlobalDiverged as err:  # the same blobs would diverge again: no retry
            self._stop_diverged(rnd, err)
        except Exception as err:
            with self.store.transaction() as s:
                s.execute(update(Round).where(Round.id == round_id, Round.status == "closing",
                                              Round.claimed_at == rnd.claimed_at)
                          .values(status="open", claimed_at=None))
            err.add_note(f"run {run.id}: closing round {rnd.index} failed; it is open again")
            raise

    def _stop_diverged(self, rnd: Round, err: GlobalDiverged) -> None:
        """The run stops: its round is abandoned with the reason, the last global stays."""
        with self.store.transaction() as s:
            done = s.execute(update(Round).where(Round.id == rnd.id, Round.status == "closing",
                                                 Round.claimed_at == rnd.claimed_at)
                             .values(status="abandoned", metrics={"stopped": str(err)}))
            run = s.get(Run, rnd.run_id)
            if done.rowcount and run is not None:  # type: ignore[attr-defined]
                run.status = "stopped"
                log.error("run %d: stopped after %d rounds: %s", run.id, rnd.index, err)

    def _close_claimed(self, run: Run, rnd: Round, updates: list[Update]) -> None:
        round_id = rnd.id
        started = time.perf_counter()
        coord, rules = self._coordinator(run, rnd)
        clip = None if rules.clip is None else rules.clip.value  # this round's C
        plan = coord.open_round()
        if plan.sampled != rnd.sampled:
            raise RuntimeError(f"round {rnd.index}: resampling gave {plan.sampled}, "
                               f"stored {rnd.sampled}")
        with self.store.transaction() as s:
            terms = self.store.terms(s, run)
        extra: dict[str, Any] = {}
        if terms.secagg is not None:  # the server has only the survivors' sum
            new_global, extra = secagg_global(SecAggRounds(self.store), rnd, terms,
                                              coord.global_state)
            refuse_non_finite_global(rnd.index, new_global)
        else:
            updates = self._fold(coord, rnd, updates)
            new_global = coord.close_round()
        setup = self.store.setup(run)
        # epsilon after this round, as pfl-sim's metrics rows have it; the global state carries
        # it too, so a device's export can write it in the model card (docs/privacy.md)
        spent = privacy_spent(setup.aggregation, setup.schedule, len(rnd.roster), rnd.index + 1,
                              clip, [n for _, n in rules.earlier], rules.noised)
        n = len(rnd.roster)
        meta = {"rounds_done": str(rnd.index + 1),
                **server_metadata(spent, n, setup.schedule.sample_size(n))}
        digest = self.store.blobs.put(state_to_bytes(new_global, meta))
        crash_point("close_after_blob")
        metrics = {**round_metrics(updates), **spent, **extra}
        with self.store.transaction() as s:
            # only under the claim whose updates were folded: a replica starting up reopens
            # closing rounds (recover), so uploads can land before the next claim
            done = s.execute(update(Round).where(Round.id == round_id,
                                                 Round.status == "closing",
                                                 Round.claimed_at == rnd.claimed_at)
                             .values(status="closed", closed_at=time.time(),
                                     result_hash=digest, metrics=metrics))
            if not done.rowcount:  # type: ignore[attr-defined]
                return  # another keeper finished it or claimed it anew
            run = s.get(Run, rnd.run_id)
            assert run is not None
            run.rounds_done = rnd.index + 1
            run.global_hash = digest
            if rules.clip is not None:  # the next round's C, moved by adaptive clipping
                s.merge(RunClipNorm(run_id=run.id, clip_norm=rules.clip.value))
            if run.rounds_done >= run.rounds_total:
                run.status = "finished"
            elif run.status == "active":
                self._open_round(s, run)
        log.info("run %d: round %d closed with %d/%d updates in %.3fs", run.id, rnd.index,
                 len(updates), len(rnd.sampled), time.perf_counter() - started)

    def _fold(self, coord: Coordinator, rnd: Round, updates: list[Update]) -> list[Update]:
        """Submit each stored update in turn; return those folded.

        One the close cannot read or the Coordinator refuses is dropped with a warning and
        the round closes with the others: retrying cannot repair it, and reopening the round
        for it would hold back every honest client's update for good. A blob that cannot be
        fetched (an I/O error) still fails the close, to be retried.
        """
        folded = []
        for row in updates:
            try:
                coord.submit(row.client_id, row.num_samples,
                             load_state(self.store.blobs.path(row.blob_hash)))
            except (CorruptStateError, UpdateRejected) as err:
                log.warning("run %d: round %d: dropped client %d's update, which the close "
                            "cannot use (%s)", rnd.run_id, rnd.index, row.client_id, err)
                continue
            folded.append(row)
            crash_point("close_mid_fold")
        return folded
