"""Task polling: what a client should do now."""

from __future__ import annotations

from fastapi import APIRouter

from pflkit.server.api.deps import CurrentClient, EnrollmentTokenDep, ServiceDep
from pflkit.server.api.schemas import TaskPreviewPublic, TaskPublic

router = APIRouter(tags=["tasks"])


@router.get("/task")
def poll_task(client_id: CurrentClient, service: ServiceDep) -> TaskPublic:
    """Train (round, deadline, algorithm config, global state hash), wait, or stop."""
    return TaskPublic(**service.tasks.task(client_id))


@router.get("/task/preview")
def preview_task(_: EnrollmentTokenDep, service: ServiceDep) -> TaskPreviewPublic:
    """The current run's algorithm, model and input shape for an enrollment token's holder.

    A device builds them before it enrolls: one that cannot keeps its token unspent and is
    never sampled. The token is checked (401, 403, 409 as for enrollment), not spent.
    """
    return TaskPreviewPublic(**service.tasks.preview())
