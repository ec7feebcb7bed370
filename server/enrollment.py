"""Enrollment and client credentials: one-time tokens, client secrets, revocation.

Secrets are high-entropy random strings; only their SHA-256 is stored, so a database leak
reveals no credential.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any

from sqlalchemy import exists, func, select, union_all, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from pflkit.sdk.protocol import MAX_ID
from pflkit.server.blobs import sha256
from pflkit.server.errors import Conflict, Forbidden, NotFound, Unauthorized
from pflkit.server.orm import Client, EnrollmentToken
from pflkit.server.store import Store

log = logging.getLogger(__name__)

ENROLL_ATTEMPTS = 50  # concurrent enrollments racing for the next free client id


class _ClientIdTaken(Exception):
    """A concurrent enrollment took the client id this one picked (PostgreSQL)."""


def hash_secret(secret: str) -> str:
    """Hash a token or client secret for storage (high-entropy: a plain SHA-256 suffices)."""
    return sha256(secret.encode())


class Enrollment:
    """Tokens, enrollment, authentication and the client list."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def issue_token(self, client_id: int | None, ttl: float | None) -> tuple[int, str]:
        """Issue a one-time enrollment token (returned once; only its hash is stored)."""
        token = "pfe_" + secrets.token_urlsafe(32)
        with self.store.transaction() as s:
            if client_id is not None:
                if s.get(Client, client_id) is not None:
                    raise Conflict(f"client id {client_id} is already enrolled")
                taken = s.scalar(select(EnrollmentToken.id).where(
                    EnrollmentToken.client_id == client_id, EnrollmentToken.used_at.is_(None),
                    EnrollmentToken.revoked_at.is_(None)))
                if taken is not None:
                    raise Conflict(f"client id {client_id} is reserved by token {taken}")
            row = EnrollmentToken(token_hash=hash_secret(token), client_id=client_id,
                                  expires_at=None if ttl is None else time.time() + ttl)
            s.add(row)
            s.flush()
            return row.id, token

    def revoke_token(self, token_id: int) -> None:
        """Make an unused enrollment token useless."""
        with self.store.transaction() as s:
            row = s.get(EnrollmentToken, token_id)
            if row is None:
                raise NotFound(f"no enrollment token {token_id}")
            if row.used_at is not None:
                raise Conflict(f"enrollment token {token_id} was already used")
            row.revoked_at = row.revoked_at or time.time()

    def enroll(self, token: str) -> tuple[int, str]:
        """Trade an enrollment token for a client id and a per-client secret.

        A token without a reserved id gets the lowest id that no client holds and no unused
        token reserves (always within ``MAX_ID``). SQLite serializes
        enrollments (the token claim takes its write lock), but under PostgreSQL's READ
        COMMITTED two can pick the same id: the loser's insert fails, its claim rolls back,
        and it tries again with the next id.
        """
        for _ in range(ENROLL_ATTEMPTS):
            try:
                return self._enroll_once(token)
            except _ClientIdTaken:
                continue
        raise Conflict(f"{ENROLL_ATTEMPTS} concurrent enrollments took the client ids this one "
                       "picked; the token is still valid: try again", retry_after=1.0)

    def check_token(self, token: str) -> None:
        """Refuse a token that could not enroll now, as :meth:`enroll` would; spend nothing."""
        with self.store.transaction() as s:
            row = _usable_token(s, token, time.time())
            if row.used_at is not None:
                raise Conflict("this enrollment token was already used")

    def _enroll_once(self, token: str) -> tuple[int, str]:
        secret = "pfc_" + secrets.token_urlsafe(32)
        now = time.time()
        with self.store.transaction() as s:
            row = _usable_token(s, token, now)
            claimed = s.execute(update(EnrollmentToken).where(
                EnrollmentToken.id == row.id, EnrollmentToken.used_at.is_(None))
                .values(used_at=now))
            if not claimed.rowcount:  # type: ignore[attr-defined]
                raise Conflict("this enrollment token was already used")
            client_id = row.client_id
            reserved = client_id is not None
            if client_id is None:
                client_id = _lowest_free_id(s)
                if client_id is None:
                    raise Conflict(f"every client id up to {MAX_ID} is taken")
            s.add(Client(id=client_id, secret_hash=hash_secret(secret)))
            try:
                s.flush()
            except IntegrityError as err:
                if not reserved:
                    raise _ClientIdTaken(client_id) from err
                raise Conflict(f"client id {client_id} is already enrolled") from err
        log.info("enrolled client %d", client_id)
        return client_id, secret

    def authenticate(self, secret: str) -> int:
        """Return the client id of a secret; unknown -> 401, revoked -> 403."""
        with self.store.transaction() as s:
            client = s.scalar(select(Client).where(Client.secret_hash == hash_secret(secret)))
            if client is None:
                raise Unauthorized("unknown client credentials")
            if client.revoked_at is not None:
                raise Forbidden(f"client {client.id} has been revoked")
            return client.id

    def revoke_client(self, client_id: int) -> None:
        """Revoke a client: its secret stops working; it leaves future rosters."""
        with self.store.transaction() as s:
            client = s.get(Client, client_id)
            if client is None:
                raise NotFound(f"no client {client_id}")
            client.revoked_at = client.revoked_at or time.time()

    def list_clients(self) -> list[dict[str, Any]]:
        """Every enrolled client with its status."""
        with self.store.transaction() as s:
            return [{"id": c.id, "enrolled_at": c.enrolled_at, "revoked": c.revoked_at is not None,
                     "last_seen": c.last_seen}
                    for c in s.scalars(select(Client).order_by(Client.id))]


def _usable_token(s: Session, token: str, now: float) -> EnrollmentToken:
    """The token's row; unknown -> 401, revoked or expired -> 403 (used: the caller's check)."""
    row = s.scalar(select(EnrollmentToken).where(EnrollmentToken.token_hash == hash_secret(token)))
    if row is None:
        raise Unauthorized("unknown enrollment token")
    if row.revoked_at is not None:
        raise Forbidden("this enrollment token was revoked")
    if row.expires_at is not None and row.expires_at < now:
        raise Forbidden("this enrollment token has expired")
    return row


def _lowest_free_id(s: Session) -> int | None:
    """The lowest client id that no client holds and no unused token reserves (None: full)."""
    taken = union_all(
        select(Client.id.label("id")),
        select(EnrollmentToken.client_id.label("id")).where(
            EnrollmentToken.client_id.isnot(None), EnrollmentToken.used_at.is_(None),
            EnrollmentToken.revoked_at.is_(None)),
    ).cte("taken")
    if s.scalar(select(taken.c.id).where(taken.c.id == 0).limit(1)) is None:
        return 0
    after = taken.alias("after")
    return s.scalar(select(func.min(taken.c.id + 1)).where(
        taken.c.id < MAX_ID, ~exists().where(after.c.id == taken.c.id + 1)))
