"""Evaluation and optimization over HTTP: labels, eval runs, optimization runs, candidates and
approval (docs/evaluation.md). Runs go on in the server's background; follow them by id."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from fleet_rlm.api.deps import Quality, Service, Sessions
from fleet_rlm.api.errors import ErrorBody, Responses
from fleet_rlm.api.quality_schemas import (
    EvalRunCreate,
    LabelCreate,
    LabelList,
    LabelOut,
    OptimizationCreate,
    ProgramList,
    ProgramOut,
    RunList,
    RunOut,
)
from fleet_rlm.api.text import Text
from fleet_rlm.quality.labels import expectations_from, label_turn
from fleet_rlm.quality.optimize import approve
from fleet_rlm.quality.runs import QualityRuns

router = APIRouter(tags=["evaluation"])
LABEL_NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "No such label (label_not_found)"}}
SESSION_NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "No such session (session_not_found)"}}
PROGRAM_NOT_FOUND: Responses = {404: {"model": ErrorBody, "description": "No such program (program_not_found)"}}


def _runs(request: Request) -> QualityRuns:
    runs: QualityRuns = request.app.state.quality_runs
    return runs


@router.post(
    "/labels",
    status_code=201,
    response_model=LabelOut,
    responses={
        404: {"model": ErrorBody, "description": "No such turn (turn_not_found)"},
        409: {"model": ErrorBody, "description": "label_exists, or turn_active: the turn has not ended"},
        422: {
            "model": ErrorBody,
            "description": "turn_not_captured (it ran without capture_replays), invalid_expectations, invalid_label",
        },
    },
)
async def create_label(body: LabelCreate, service: Service) -> LabelOut:
    """Record an approved gold label for a captured turn."""
    record = await label_turn(
        service,
        body.turn_id,
        answer=body.answer,
        value=body.value,
        expectations=expectations_from(body.expectations),
        group=body.group,
        critical=body.critical,
        benchmark=body.benchmark,
    )
    return LabelOut.of(record)


@router.get("/labels", response_model=LabelList, responses=SESSION_NOT_FOUND)
async def list_labels(
    quality: Quality,
    sessions: Sessions,
    session: Annotated[Text | None, Query(description="Only this session's labels (id or name)")] = None,
    group: Annotated[Text | None, Query(description="Only labels of this source group")] = None,
) -> LabelList:
    """Labels, oldest first."""
    session_id = (await sessions.get(session)).id if session else None
    records = await quality.labels(session_id=session_id, groups=[group] if group else None)
    return LabelList(items=[LabelOut.of(r) for r in records])


@router.get("/labels/{label}", response_model=LabelOut, responses=LABEL_NOT_FOUND)
async def get_label(label: str, quality: Quality) -> LabelOut:
    """``label`` is the label's id or the labeled turn's id."""
    return LabelOut.of(await quality.label(label))


@router.delete("/labels/{label}", status_code=204, responses=LABEL_NOT_FOUND)
async def delete_label(label: str, quality: Quality) -> Response:
    await quality.delete_label(label)
    return Response(status_code=204)


@router.post(
    "/eval-runs",
    status_code=202,
    response_model=RunOut,
    responses={**SESSION_NOT_FOUND, 422: {"model": ErrorBody, "description": "no_labels: nothing to evaluate"}},
)
async def start_eval_run(body: EvalRunCreate, request: Request) -> RunOut:
    """Replay the labeled turns (concurrently) and score them; follow the run at its id."""
    run = await _runs(request).start_eval(session=body.session, groups=list(body.groups))
    return RunOut.model_validate(run)


@router.get("/eval-runs", response_model=RunList)
async def list_eval_runs(request: Request) -> RunList:
    """The eval runs this server process started, oldest first."""
    return RunList(items=[RunOut.model_validate(r) for r in _runs(request).of_kind("eval")])


@router.get(
    "/eval-runs/{run_id}",
    response_model=RunOut,
    responses={404: {"model": ErrorBody, "description": "No such run (eval_run_not_found)"}},
)
async def get_eval_run(run_id: str, request: Request) -> RunOut:
    return RunOut.model_validate(_runs(request).get(run_id, "eval"))


@router.post(
    "/optimizations",
    status_code=202,
    response_model=RunOut,
    responses={
        **SESSION_NOT_FOUND,
        422: {
            "model": ErrorBody,
            "description": "invalid_budget (give exactly one of gepa_budget and max_metric_calls), or a dataset "
            "rule: dataset_min_examples, dataset_min_groups, dataset_split",
        },
    },
)
async def start_optimization(body: OptimizationCreate, request: Request) -> RunOut:
    """Search with dspy.GEPA, validate and gate; the candidate is saved inactive. Follow the run at its id."""
    run = await _runs(request).start_optimization(
        session=body.session, gepa_budget=body.gepa_budget, max_metric_calls=body.max_metric_calls
    )
    return RunOut.model_validate(run)


@router.get("/optimizations", response_model=RunList)
async def list_optimizations(request: Request) -> RunList:
    """The optimization runs this server process started, oldest first."""
    return RunList(items=[RunOut.model_validate(r) for r in _runs(request).of_kind("optimization")])


@router.get(
    "/optimizations/{run_id}",
    response_model=RunOut,
    responses={404: {"model": ErrorBody, "description": "No such run (optimization_not_found)"}},
)
async def get_optimization(run_id: str, request: Request) -> RunOut:
    return RunOut.model_validate(_runs(request).get(run_id, "optimization"))


@router.get("/programs", response_model=ProgramList)
async def list_programs(quality: Quality) -> ProgramList:
    """Candidates, approved and retired programs, oldest first, and the one serving."""
    serving = (await quality.serving()).version
    return ProgramList(serving=serving, items=[ProgramOut.of(p, serving) for p in await quality.programs()])


@router.get("/programs/{version}", response_model=ProgramOut, responses=PROGRAM_NOT_FOUND)
async def get_program(version: str, quality: Quality) -> ProgramOut:
    """A program with its gate report, condition by condition."""
    serving = (await quality.serving()).version
    return ProgramOut.of(await quality.program(version), serving)


@router.post(
    "/programs/{version}/approve",
    response_model=ProgramOut,
    responses={
        **PROGRAM_NOT_FOUND,
        409: {
            "model": ErrorBody,
            "description": "program_not_candidate, candidate_altered (its bytes changed), gate_failed, or "
            "stale_evidence (configuration, code, dependencies or the serving program changed: re-evaluate)",
        },
    },
)
async def approve_program(version: str, service: Service) -> ProgramOut:
    """Serve the candidate from the next turn, once its bytes and identities check out."""
    record = await approve(service, version)
    return ProgramOut.of(record, record.version)


@router.post(
    "/programs/rollback",
    response_model=ProgramOut,
    responses={409: {"model": ErrorBody, "description": "nothing_to_roll_back: the built-in program serves"}},
)
async def rollback_program(quality: Quality) -> ProgramOut:
    """Retire the serving program; the one approved before it (or the built-in program) serves again."""
    record = await quality.retire_program()
    serving = (await quality.serving()).version
    return ProgramOut.of(record, serving)
