"""Deterministic re-run of a finished task: loading it from the database.

The pure half — recorded replies and results fed back through the current
engine, and the comparison of steps — is :mod:`engine.replay`; this module
loads a task as an :class:`~engine.replay.RecordedRun` with today's tool
definitions and the limits the run had.
"""

from __future__ import annotations

from typing import Any

from engine.pricing import snapshot_price
from engine.replay import RecordedRun, RerunResult, policy_decision, rerun
from engine.routing import ROUTE_KEY, ROUTING_KEY, Routing
from engine.spec import AgentSnapshot, ToolSpec
from infra import runtime
from infra.errors import ErrorKind, ServiceError
from registry.models import Tool
from registry.services import spec_for
from runs.journal import run_history
from runs.tasks import run_limits
from traces.export import inherited_taint

# What the trace pages and tests know this module by; they live in engine.replay.
__all__ = [
    "RecordedRun",
    "RerunResult",
    "TaskNotFinal",
    "current_specs",
    "specs_of",
    "policy_decision",
    "recorded_run",
    "rerun",
    "task_rerun",
]


# -- from the database ----------


class TaskNotFinal(ServiceError):
    """Only a finished run can be re-run or forked."""

    default_kind = ErrorKind.CONFLICT


def current_specs(task: Any) -> dict[str, ToolSpec]:
    """Today's definitions of the tools the run was offered.

    A tool disabled or deleted since is left out (the re-run sees an unknown
    tool). An imported trace may name tools this instance never had: those
    keep the definition the trace carries.
    """
    return specs_of(AgentSnapshot.from_json(task.agent_snapshot), task=task)


def specs_of(snapshot: AgentSnapshot, *, task: Any) -> dict[str, ToolSpec]:
    """Today's definitions of ``snapshot``'s tools (:func:`current_specs`), for
    the agent a run started with and for each it handed off to."""
    names = list(dict.fromkeys(d["name"] for d in snapshot.tools))
    live = {t.name: t for t in Tool.objects.filter(name__in=names)}
    specs: dict[str, ToolSpec] = {}
    for name in names:
        tool = live.get(name)
        if tool is not None:
            if tool.enabled and tool.confirmed:
                specs[name] = spec_for(tool)
        elif task.is_imported and (spec := snapshot.spec(name)) is not None:
            specs[name] = spec
    return specs


def recorded_run(task: Any) -> RecordedRun:
    """Load a finished task as a :class:`RecordedRun`."""
    snapshot = AgentSnapshot.from_json(task.agent_snapshot)
    return RecordedRun(
        task_id=str(task.pk),
        goal=task.goal,
        system=snapshot.system_prompt,
        model=task.model,
        steps=[s.record() for s in task.steps.order_by("seq")],
        stop_reason=task.stop_reason,
        history=run_history(task, snapshot=snapshot),
        inherited_taint=inherited_taint(task),
        price=snapshot_price(snapshot.extra),
        # A run no rule routed asked the model first: its re-run does too.
        routing=(
            Routing.from_json(snapshot.extra.get(ROUTING_KEY))
            if ROUTE_KEY not in snapshot.extra
            else None
        ),
        agent=snapshot,
    )


def task_rerun(*, task: Any) -> RerunResult:
    """Re-run a finished task deterministically through the current engine.

    Raises :class:`TaskNotFinal` while the task is queued, running or waiting.
    Nothing is executed and nothing is written.
    """
    if not task.is_final:
        raise TaskNotFinal(str(task.pk))
    return rerun(
        recorded_run(task),
        specs=current_specs(task),
        limits=run_limits(task),
        redactor=runtime.redactor(),
        specs_for=lambda snapshot: specs_of(snapshot, task=task),
    )
