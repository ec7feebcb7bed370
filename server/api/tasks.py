"""Task polling: what a client should do now."""

from __future__ import annotations

from fastapi import APIRouter

from pflkit.server.api.deps import CurrentClient, ServiceDep
from pflkit.server.api.schemas import TaskPublic

router = APIRouter(tags=["tasks"])


@router.get("/task")
def poll_task(client_id: CurrentClient, service: ServiceDep) -> TaskPublic:
    """Train (round, deadline, algorithm config, global state hash), wait, or stop."""
    return TaskPublic(**service.tasks.task(client_id))
