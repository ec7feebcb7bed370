"""Liveness: the process answers and the database is reachable."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from pflkit.server.api.deps import SessionDep
from pflkit.server.api.schemas import HealthPublic

router = APIRouter(tags=["health"])


@router.get("/health")
def health(session: SessionDep) -> HealthPublic:
    """Return ok when the database answers a trivial query."""
    session.execute(text("SELECT 1"))
    return HealthPublic(status="ok", database="ok")
