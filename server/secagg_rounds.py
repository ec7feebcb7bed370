"""Secure aggregation on pfl-server: a round's four steps over HTTP, kept in the database.

The protocol is :mod:`pflkit.sdk.secagg`'s state machine; this part carries its messages. Each
accepted message is stored in its wire form (a masked input as a blob: masked, it looks
uniform) and the round's :class:`SecAggServer` is rebuilt by replaying them, with the step
closes recorded in ``secagg_steps``. So any worker process, and a restarted server, checks a
message against the same state, and a refused message (422, 409, 410) stores nothing.

Each request's transaction first writes the round's row, which serializes the round's writers
(SQLite's write lock, PostgreSQL's row lock). A step closes when everyone it waits for has
sent (all sampled devices, then those that advertised keys, then those that shared) or, for
the unmask step, once every secret it needs has ``t`` shares from its holders (or every
survivor answered); or when ``round_deadline`` seconds passed since it began (the round
keeper's tick). A close below the threshold fails the round: the keeper
closes it with the global state unchanged and the error in its metrics, and opens the next.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from pflkit.sdk.secagg import wire
from pflkit.sdk.secagg.messages import Aggregate, MaskedInput, RoundFailed, RoundSetup, SecAggError
from pflkit.server.blobs import sha256
from pflkit.server.errors import Conflict, Forbidden, Gone, Invalid, NotFound
from pflkit.server.orm import Round, SecAggMessage, SecAggStep
from pflkit.server.store import RunTerms, Store

STAGES = ("keys", "shares", "masked", "unmask", "done")
_ANSWER = {"keys": "shares", "shares": "masked", "unmask": "unmask"}  # GET step -> stage it needs


class SecAggRounds:
    """The HTTP side of secure-aggregation rounds, and the keeper's view of them."""

    def __init__(self, store: Store, on_quorum: Callable[[], None] = lambda: None) -> None:
        self.store = store
        self.on_quorum = on_quorum  # a round is ready to close (done or failed)

    def _round(self, s: Session, client_id: int, run_id: int,
               round_index: int) -> tuple[Round, RunTerms]:
        run = self.store.get_run(s, run_id)
        terms = self.store.terms(s, run)
        if terms.secagg is None:
            raise NotFound(f"run {run_id} does not use secure aggregation")
        rnd = self.store.round_of(s, run, round_index)
        if rnd is None:
            raise Conflict(f"round {round_index} of run {run_id} has not opened")
        if client_id not in rnd.sampled:
            raise Forbidden(f"client {client_id} was not sampled in round {round_index}")
        if rnd.status != "open":
            raise Gone(f"round {round_index} of run {run_id} is {rnd.status}")
        return rnd, terms

    @staticmethod
    def setup(rnd: Round, terms: RunTerms) -> RoundSetup:
        """The round's public setup (the task carries it to the devices)."""
        assert terms.secagg is not None
        return wire.round_setup(terms.secagg, rnd.id, rnd.sampled, rnd.global_hash,
                                terms.schema)

    @staticmethod
    def step_of(s: Session, rnd: Round, write: bool = False) -> SecAggStep:
        """The round's step row (at ``keys`` until first written; ``write``: added now)."""
        row = s.get(SecAggStep, rnd.id)
        if row is None:
            row = SecAggStep(round_id=rnd.id, stage="keys", stage_at=rnd.opened_at, error=None)
            if write:
                s.add(row)
        return row

    def _replay(self, s: Session, rnd: Round, setup: RoundSetup, stage: str,
                add_vectors: bool = False) -> tuple[Any, dict]:
        """The round's server in ``stage``, its messages so far received; earlier closes' output.

        Checking a message needs who masked, not what: unless ``add_vectors`` (the keeper's
        sum), stored masked inputs are replayed as zeros and their blobs are not read.
        """
        from pflkit.sdk.secagg.server import SecAggServer  # needs cryptography: SecAgg runs only

        seen: set[bytes] = set()  # every key advertised in an earlier round: never again
        for payload in s.scalars(select(SecAggMessage.payload).where(
                SecAggMessage.step == "keys", SecAggMessage.round_id != rnd.id)):
            keys = wire.keys_from_wire(0, 0, payload)
            seen.update((keys.cipher_key, keys.mask_key))
        server = SecAggServer(setup, seen)
        rows = s.scalars(select(SecAggMessage).where(SecAggMessage.round_id == rnd.id)
                         .order_by(SecAggMessage.id)).all()
        closes = {"keys": server.close_keys, "shares": server.close_shares,
                  "masked": server.close_masked}
        out = {}
        zeros = None if add_vectors else bytes(4 * setup.dimension)
        for step in STAGES[:STAGES.index(stage) + 1]:
            for row in rows:
                if row.step == step:
                    self._receive(server, step, row.client_id, rnd.id, row.payload, zeros)
            if step != stage and step in closes:
                out[step] = closes[step]()
        return server, out

    def _receive(self, server: Any, step: str, sender: int, round_id: int,
                 payload: dict[str, Any], vector: bytes | None = None) -> None:
        if step == "keys":
            server.receive_keys(wire.keys_from_wire(sender, round_id, payload))
        elif step == "shares":
            server.receive_shares(wire.share_keys_from_wire(sender, round_id, payload))
        elif step == "masked":
            server.receive_masked(MaskedInput(
                sender, round_id, vector or self.store.blobs.get(payload["blob"])))
        else:
            server.receive_unmask(wire.unmask_from_wire(sender, round_id, payload))

    def vector_limit(self, client_id: int, run_id: int, round_index: int) -> int:
        """The bytes a masked input has (4 per coordinate): its body is read up to that."""
        with self.store.transaction() as s:
            rnd, terms = self._round(s, client_id, run_id, round_index)
            return 4 * self.setup(rnd, terms).dimension

    def receive(self, client_id: int, run_id: int, round_index: int, step: str,
                body: dict[str, Any] | bytes) -> bool:
        """Check a device's message against the round and store it; True: a repeat of it."""
        ready = False
        vector = body if isinstance(body, bytes) else None
        try:  # stored as re-encoded here, never as sent: no field a device adds is kept
            payload = {"blob": sha256(body)} if isinstance(body, bytes) else \
                wire.canonical(step, body)
        except SecAggError as err:
            raise Invalid(str(err)) from None
        with self.store.transaction() as s:
            # a write first: it waits for the round's other writers, then reads what they wrote
            s.execute(update(Round).where(Round.run_id == run_id, Round.index == round_index)
                      .values(received=Round.received))
            rnd, terms = self._round(s, client_id, run_id, round_index)
            row = self.step_of(s, rnd, write=True)
            prior = s.scalar(select(SecAggMessage.payload).where(
                SecAggMessage.round_id == rnd.id, SecAggMessage.client_id == client_id,
                SecAggMessage.step == step))
            if prior is not None:
                if prior == payload:
                    return True
                raise Conflict(f"client {client_id} already sent a different {step} message "
                               f"in round {round_index} (a replay)")
            self._expect(row, step, round_index)
            setup = self.setup(rnd, terms)
            server, _ = self._replay(s, rnd, setup, step)
            try:
                self._receive(server, step, client_id, rnd.id, payload, vector)
            except SecAggError as err:
                raise Invalid(str(err)) from None
            if vector is not None:
                self.store.blobs.put(vector, payload["blob"])
            s.add(SecAggMessage(round_id=rnd.id, client_id=client_id, step=step,
                                payload=payload))
            sent = len(s.scalars(select(SecAggMessage.client_id).where(
                SecAggMessage.round_id == rnd.id, SecAggMessage.step == step)).all())
            if step == "unmask":
                complete = server.unmask_complete()
            else:
                complete = sent >= (len(setup.roster) if step == "keys" else len(s.scalars(
                    select(SecAggMessage.client_id).where(
                        SecAggMessage.round_id == rnd.id,
                        SecAggMessage.step == STAGES[STAGES.index(step) - 1])).all()))
            if complete:
                ready = self._close(server, row, sent)
        if ready:
            self.on_quorum()
        return False

    @staticmethod
    def _expect(row: SecAggStep, step: str, round_index: int) -> None:
        if row.stage == "failed":
            raise Gone(f"round {round_index} failed: {row.error}")
        now, then = STAGES.index(row.stage), STAGES.index(step)
        if then < now:
            raise Gone(f"the {step} step of round {round_index} is over (late)")
        if then > now:
            raise Conflict(f"the {step} step of round {round_index} has not begun "
                           f"(the round is at {row.stage})")

    @staticmethod
    def _close(server: Any, row: SecAggStep, sent: int) -> bool:
        """Close the current step; True when the round is ready for the keeper."""
        closes = {"keys": server.close_keys, "shares": server.close_shares,
                  "masked": server.close_masked}
        try:
            if row.stage in closes:
                closes[row.stage]()
            elif sent < server.setup.threshold:
                raise RoundFailed(f"{sent} devices answered the unmask request, threshold "
                                  f"{server.setup.threshold}; nothing unmasked")
        except RoundFailed as err:
            row.stage, row.error = "failed", str(err)
            return True
        row.stage, row.stage_at = STAGES[STAGES.index(row.stage) + 1], time.time()
        return row.stage == "done"

    def answer(self, client_id: int, run_id: int, round_index: int, step: str) -> dict[str, Any]:
        """What the server sends a device once ``step`` closed (409 with Retry-After before)."""
        with self.store.transaction() as s:
            rnd, terms = self._round(s, client_id, run_id, round_index)
            row = self.step_of(s, rnd)
            if row.stage == "failed":
                raise Gone(f"round {round_index} failed: {row.error}")
            need = _ANSWER[step]
            if STAGES.index(row.stage) < STAGES.index(need):
                raise Conflict(f"round {round_index} is at step {row.stage}",
                               retry_after=self.store.settings.tick_seconds)
            _, out = self._replay(s, rnd, self.setup(rnd, terms), need)
        if step == "unmask":
            request = out["masked"]
            if client_id not in request.survivors:
                raise Gone(f"client {client_id} sent no masked input in round {round_index}")
            return wire.request_to_wire(request)
        mine = out[step].get(client_id)
        if mine is None:
            raise Gone(f"client {client_id} dropped out of round {round_index} at {step}")
        return wire.directory_to_wire(mine) if step == "keys" else wire.shares_to_wire(mine)

    def due(self, s: Session, rnd: Round, now: float) -> bool:
        """The keeper's check: the round is done or failed (a step past its deadline closes)."""
        row = self.step_of(s, rnd)
        if row.stage in ("done", "failed"):
            return True
        if now < row.stage_at + self.store.settings.round_deadline:
            return False
        row = self.step_of(s, rnd, write=True)
        run_terms = self.store.terms(s, self.store.get_run(s, rnd.run_id))
        server, _ = self._replay(s, rnd, self.setup(rnd, run_terms), row.stage)
        sent = len(s.scalars(select(SecAggMessage.client_id).where(
            SecAggMessage.round_id == rnd.id, SecAggMessage.step == row.stage)).all())
        return self._close(server, row, sent)

    def aggregate(self, rnd: Round, terms: RunTerms) -> Aggregate:
        """The round's unmasked sum; RoundFailed if it failed or its shares do not rebuild."""
        with self.store.transaction() as s:
            row = self.step_of(s, rnd)
            if row.stage != "done":
                raise RoundFailed(row.error or f"round {rnd.index} ended at step {row.stage}")
            server, _ = self._replay(s, rnd, self.setup(rnd, terms), "unmask", add_vectors=True)
        return server.finish()  # type: ignore[no-any-return]



def refuse_unfit_secagg(terms: RunTerms, clients_per_round: int | None) -> None:
    """Refuse, at a run's creation, a secure aggregation its rounds could never complete.

    One device cannot be masked with others'; the server needs ``cryptography``; and DP's C
    and z must fit the quantization grid of the largest roster a round can have
    (``clients_per_round``, else ``MAX_CLIENTS``): more devices make the grid coarser and
    the threshold larger, so if that round's grid carries them every smaller round's does
    (:class:`~pflkit.sdk.secagg.dp.DpGrid`).
    """
    import importlib.util

    from pflkit.sdk.secagg.dp import DpGrid
    from pflkit.sdk.secagg.messages import MAX_CLIENTS

    if terms.secagg is None:
        return
    if clients_per_round == 1:
        raise Invalid("run config: secagg needs at least 2 clients per round (it masks each "
                      "update with others')")
    if importlib.util.find_spec("cryptography") is None:
        raise Invalid("run config: secagg needs the 'cryptography' package on this server "
                      "(the pflkit[secagg] extra)")
    c, z = terms.secagg.get("dp_clip_norm"), terms.secagg.get("dp_noise_multiplier")
    if c is None or z is None:
        return
    devices = clients_per_round or MAX_CLIENTS
    setup = wire.round_setup(terms.secagg, 0, list(range(devices)), "", terms.schema)
    try:
        DpGrid.of(setup, c, z)
    except ValueError as err:
        raise Invalid(f"run config: secagg with DP at {devices} devices per round: {err}") \
            from None
