"""Database tables of the aggregation server (SQLAlchemy 2 declarative models).

The database is the source of truth for everything but tensors: runs, rounds, enrolled
clients, enrollment tokens and accepted updates. Tensors live in the blob store and rows
name them by their SHA-256. Secrets are stored only as SHA-256 digests.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    """Declarative base; times are Unix seconds (floats), the same in SQLite and PostgreSQL."""

    type_annotation_map = {dict[str, Any]: JSON, list[int]: JSON}


class Run(Base):
    """One federated training run (at most one is active or paused at a time)."""

    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    config_toml: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))  # active | paused | stopped | finished
    rounds_total: Mapped[int]
    rounds_done: Mapped[int] = mapped_column(default=0)
    global_hash: Mapped[str] = mapped_column(String(64))  # the newest committed global state
    created_at: Mapped[float] = mapped_column(default=time.time)


class Round(Base):
    """A round of a run: who was asked, which global state they start from, its outcome."""

    __tablename__ = "rounds"
    __table_args__ = (UniqueConstraint("run_id", "index"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    index: Mapped[int]
    status: Mapped[str] = mapped_column(String(16))  # open | closing | closed | abandoned
    roster: Mapped[list[int]]  # enrolled clients the sample was drawn from
    sampled: Mapped[list[int]]
    received: Mapped[int] = mapped_column(default=0)  # accepted updates so far
    global_hash: Mapped[str] = mapped_column(String(64))  # the state clients train from
    opened_at: Mapped[float] = mapped_column(default=time.time)
    deadline_at: Mapped[float]
    claimed_at: Mapped[float | None]  # when a worker started closing it
    closed_at: Mapped[float | None]
    result_hash: Mapped[str | None] = mapped_column(String(64))
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)


class Update(Base):
    """An accepted (durable, acknowledged) client update."""

    __tablename__ = "updates"
    __table_args__ = (UniqueConstraint("round_id", "client_id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id"), index=True)
    client_id: Mapped[int] = mapped_column(ForeignKey("clients.id"))
    blob_hash: Mapped[str] = mapped_column(String(64))
    num_samples: Mapped[int] = mapped_column(BigInteger)
    size: Mapped[int] = mapped_column(BigInteger)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    received_at: Mapped[float] = mapped_column(default=time.time)


class Client(Base):
    """An enrolled device; ``id`` is the client id algorithms and sampling see."""

    __tablename__ = "clients"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    enrolled_at: Mapped[float] = mapped_column(default=time.time)
    revoked_at: Mapped[float | None]
    last_seen: Mapped[float | None]


class EnrollmentToken(Base):
    """A one-time token an admin hands to a device so it can enroll."""

    __tablename__ = "enrollment_tokens"
    id: Mapped[int] = mapped_column(primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    client_id: Mapped[int | None]  # reserve this client id (None: the next free one)
    created_at: Mapped[float] = mapped_column(default=time.time)
    expires_at: Mapped[float | None]
    used_at: Mapped[float | None]
    revoked_at: Mapped[float | None]


class RunClipNorm(Base):
    """A DP run's clip norm for its current round, which adaptive clipping moves at each close.

    Written in the commit that closes a round (with the run's new ``global_hash``); until the
    first close the config's ``dp_clip_norm`` holds. A table of its own, so databases written
    by earlier versions open unchanged and gain it (create_all adds tables).
    """

    __tablename__ = "run_clip_norms"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    clip_norm: Mapped[float]


class RunTermsRow(Base):
    """A run's stored :class:`~pflkit.server.store.RunTerms`, computed once when it is created.

    The task config clients train with (the learning-rate schedule included) and the update
    schema: serving a round then needs no model and no PyTorch (see ``server/store.py``).
    The table and column keep their first names ("run_plans", "plan"), so databases written
    by earlier versions open unchanged (create_all adds tables, it renames nothing).
    """

    __tablename__ = "run_plans"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    terms: Mapped[dict[str, Any]] = mapped_column("plan")


class SecAggStep(Base):
    """A secure-aggregation round's current step and when it began (``server/secagg_rounds.py``).

    ``stage``: keys, shares, masked, unmask, done or failed (``error`` says why). Tables of
    their own, so databases written by earlier versions open unchanged and gain them.
    """

    __tablename__ = "secagg_steps"
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id"), primary_key=True)
    stage: Mapped[str] = mapped_column(String(16))
    stage_at: Mapped[float]
    error: Mapped[str | None] = mapped_column(Text)


class SecAggMessage(Base):
    """A message a device sent in a secure-aggregation round, as it was accepted (wire form).

    A masked input is a blob (``payload`` names it); the round's state is these messages
    replayed in order, so every worker process and a restarted server see the same round.
    """

    __tablename__ = "secagg_messages"
    __table_args__ = (UniqueConstraint("round_id", "client_id", "step"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    round_id: Mapped[int] = mapped_column(ForeignKey("rounds.id"), index=True)
    client_id: Mapped[int] = mapped_column(ForeignKey("clients.id"))
    step: Mapped[str] = mapped_column(String(16))
    payload: Mapped[dict[str, Any]]
