"""Liveness: the process answers and the database is readable."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from pflkit.server.api.deps import SessionDep, SettingsDep
from pflkit.server.api.schemas import HealthPublic
from pflkit.server.db import driver_message, sqlite_file
from pflkit.server.orm import Run

router = APIRouter(tags=["health"])
log = logging.getLogger(__name__)


@router.get("/health", responses={503: {"model": HealthPublic,
                                        "description": "the database cannot be read"}})
def health(session: SessionDep, settings: SettingsDep, response: Response) -> HealthPublic:
    """Ok when a table of the database can be read; 503 when it cannot.

    A table, not ``SELECT 1``: SQLite answers that without reading its file, so a damaged
    file would pass. A SQLite file deleted while the server runs still answers through the
    connections holding it open, but whatever is written there is lost at the next start.
    """
    database = sqlite_file(settings.db_url)
    try:
        session.scalar(select(Run.id).limit(1))
        if database is not None and not database.exists():
            raise FileNotFoundError(f"the database file {database} was deleted while the "
                                    "server runs: what it stores now is lost at its restart")
    except (SQLAlchemyError, FileNotFoundError) as err:
        log.error("health: the database cannot be read: %s",
                  driver_message(err) if isinstance(err, SQLAlchemyError) else err)
        response.status_code = 503
        return HealthPublic(status="error", database="unavailable")
    return HealthPublic(status="ok", database="ok")
