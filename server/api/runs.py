"""Runs (admin): create, inspect, pause, resume, stop; prune what ended rounds left."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from pflkit.server.api.bodies import json_body, json_schema
from pflkit.server.api.deps import AdminDep, ServiceDep, require_admin
from pflkit.server.api.params import IdPath
from pflkit.server.api.schemas import PruneIn, PrunePublic, RunCreateIn, RunPublic
from pflkit.server.runs import refused_as_invalid

router = APIRouter(prefix="/runs", tags=["runs"])


@router.post("", status_code=201, openapi_extra=json_schema(RunCreateIn))
async def create_run(body: Annotated[RunCreateIn, json_body(RunCreateIn, after=require_admin)],
                     service: ServiceDep) -> RunPublic:
    """Create a run from a pfl-sim TOML config; 409 while another run is active or paused."""
    text = body.config_toml
    if text is None:  # read again, with the server's --set overrides
        with refused_as_invalid():
            text = await run_in_threadpool(service.settings.run_config_toml)
    run = await run_in_threadpool(service.runs.create, text)
    return RunPublic(**service.runs.status(run.id))


@router.post("/prune", openapi_extra=json_schema(PruneIn))
async def prune(body: Annotated[PruneIn, json_body(PruneIn, after=require_admin)],
                service: ServiceDep) -> PrunePublic:
    """Delete the blobs no round can need again (server/retention.py): what it freed."""
    report = await run_in_threadpool(service.retention.prune, body.keep_globals, body.dry_run)
    return PrunePublic(**asdict(report))


@router.get("/current")
def current_run(service: ServiceDep, _: AdminDep) -> RunPublic:
    """Status and progress of the newest run."""
    return RunPublic(**service.runs.status(None))


@router.get("/{run_id}")
def get_run(run_id: IdPath, service: ServiceDep, _: AdminDep) -> RunPublic:
    """Status and progress of one run."""
    return RunPublic(**service.runs.status(run_id))


def _transition(service: ServiceDep, run_id: int, action: str) -> RunPublic:
    service.runs.transition(run_id, action)
    return RunPublic(**service.runs.status(run_id))


@router.post("/{run_id}/pause")
def pause_run(run_id: IdPath, service: ServiceDep, _: AdminDep) -> RunPublic:
    """Stop handing out tasks and accepting uploads until resumed."""
    return _transition(service, run_id, "pause")


@router.post("/{run_id}/resume")
def resume_run(run_id: IdPath, service: ServiceDep, _: AdminDep) -> RunPublic:
    """Continue a paused run; the open round gets a fresh deadline."""
    return _transition(service, run_id, "resume")


@router.post("/{run_id}/stop")
def stop_run(run_id: IdPath, service: ServiceDep, _: AdminDep) -> RunPublic:
    """End a run for good; its open round is abandoned."""
    return _transition(service, run_id, "stop")
