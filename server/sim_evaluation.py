"""The simulator's scores: the global model and each client's personalized model(s).

Pure functions of the algorithm, the global state, the federation and the clients' states
(the :class:`~pflkit.server.simulator.Simulation` supplies them), so a round's row and the
final report are computed the same way whoever asks. A model whose outputs are NaN or Inf (a
global model that diverged, say) gets no score rather than stopping the run: its numbers are
NaN (null in JSON), a global one is marked ``diverged`` and a group's clients are listed under
``diverged_models``, and a warning says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from torch import nn

from pflkit.sdk.algorithms.base import Algorithm, ClientState, State
from pflkit.sdk.data.federation import ClientData, Federation
from pflkit.sdk.evaluation import (
    ClientReport,
    evaluate_or_undefined,
    global_scores,
    summarize,
    versus_baseline,
)
from pflkit.sdk.scoring import ScoringCache

log = logging.getLogger(__name__)

StatesOf = Callable[[dict[int, ClientData]], Iterator[ClientState]]


def round_scores(algorithm: Algorithm, state: State, federation: Federation,
                 client_state: Callable[[int], ClientState]) -> dict[str, Any]:
    """Generic model on the global test set; personalized models on clients' own tests."""
    scoring, inference = ScoringCache(), algorithm.inference
    generic = _global_scores(scoring, inference.global_model(state), federation)
    row: dict[str, Any] = {f"global_{k}": v for k, v in generic.items()}
    if any(len(c.test) for c in federation.clients.values()):
        diverged: list[int] = []
        reports = [
            evaluate_or_undefined(inference.personalized_model(state, client_state(cid)), client,
                                  None, federation.spec.num_classes, scoring.predict, diverged)
            for cid, client in federation.clients.items()
        ]
        summary = summarize(reports)
        row.update({f"personal_{k}": summary[f"own_{k}_mean"] for k in ("top1", "ece")})
        row["personal_top1_std"] = summary["own_top1_std"]
        row |= _diverged_models("clients", diverged)
    return row


def final_scores(algorithm: Algorithm, state: State, federation: Federation,
                 states_of: StatesOf, progress: bool) -> dict[str, Any]:
    """Score every client, old and new, on each evaluation choice of its final state.

    ``states_of(members)`` yields each member's final state (after the method's stage, if
    any). Each distinct model is scored once and a body shared by several clients' models runs
    once per data set (:class:`ScoringCache`): the numbers equal scoring every model alone.
    New clients also get the generic model scored the same way (:func:`_versus_generic`).
    """
    spec = federation.spec
    scoring = ScoringCache()
    generic_model = algorithm.inference.global_model(state)
    out: dict[str, Any] = {}
    groups = {"clients": federation.clients, "new_clients": federation.new_clients}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  disable=not progress) as bar:
        for group, members in groups.items():
            if not members:
                continue
            task = bar.add_task(f"evaluating {group}", total=len(members))
            reports: dict[str, list[ClientReport]] = {}
            diverged: list[int] = []
            for client, cstate in zip(members.values(), states_of(members), strict=True):
                for label, choice in algorithm.inference.evaluation_choices(cstate).items():
                    model = algorithm.inference.personalized_model(state, cstate, choice)
                    reports.setdefault(label, []).append(
                        evaluate_or_undefined(model, client, federation.test, spec.num_classes,
                                              scoring.predict, diverged))
                bar.advance(task)
            headline = next(iter(reports))
            out[group] = {"summary": summarize(reports[headline]),
                          "per_client": [r.to_dict() for r in reports[headline]]}
            out[group] |= _diverged_models(group, diverged)
            if len(reports) > 1:
                out[group]["by_choice"] = {k: summarize(v) for k, v in reports.items()}
            if group == "new_clients":
                out[group] |= _versus_generic(generic_model, members, federation, reports,
                                              scoring)
    out["global_model"] = _global_scores(scoring, generic_model, federation)
    return out


def _global_scores(scoring: ScoringCache, model: nn.Module, federation: Federation
                   ) -> dict[str, Any]:
    """The generic model on the global test set (``diverged``, no score: warned)."""
    scores = global_scores(scoring.predict(model, federation.test), federation.test.y)
    if scores.get("diverged"):
        log.warning("the global model's outputs are NaN or Inf (its training diverged): it "
                    "gets no score")
    return scores


def _diverged_models(group: str, diverged: list[int]) -> dict[str, list[int]]:
    """``diverged_models``: the group's clients with a model of non-finite outputs (warned)."""
    if not diverged:
        return {}
    ids = sorted(set(diverged))
    log.warning("%d of the %s' models give NaN or Inf outputs (diverged, e.g. client %d): "
                "they get no score and the means leave them out", len(ids), group, ids[0])
    return {"diverged_models": ids}


def _versus_generic(generic_model: nn.Module, members: dict[int, ClientData],
                    federation: Federation, reports: dict[str, list[ClientReport]],
                    scoring: ScoringCache) -> dict[str, Any]:
    """The generic model scored like each new client's own models, and the paired counts.

    A new client chooses between its personalized (zero-shot) model and the generic one: both
    are measured on the same rows with the same class weights (eq. 20 of FedRoD), so the
    numbers compare. ``versus_generic`` is keyed ``summary`` for the headline model and by the
    ``by_choice`` labels for the others.
    """
    diverged: list[int] = []  # the generic model diverged: named once, as the global one
    generic = [evaluate_or_undefined(generic_model, client, federation.test,
                                     federation.spec.num_classes, scoring.predict, diverged)
               for client in members.values()]
    return {"generic": {"summary": summarize(generic),
                        "per_client": [r.to_dict() for r in generic]},
            "versus_generic": {label or "summary": versus_baseline(rows, generic)
                               for label, rows in reports.items()}}
