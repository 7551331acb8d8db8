"""The trace document (``reach.trace/v1``): one task with all it did."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils import timezone

from approvals.payloads import approval_payload
from approvals.selectors import task_approvals
from audit.models import AuditEvent
from audit.services import audit_event_payload
from engine.spec import AgentSnapshot, StepDetail, taint_label
from infra.runtime import redactor
from runs.models import Task
from runs.payloads import conversation_payload, step_payload, task_payload

FORMAT = "reach.trace/v1"

#: Kept for callers of the first version of this module.
audit_payload = audit_event_payload


def own_taint_labels(task: Task) -> set[str]:
    """Taint sources a task's own steps produced (``tool#seq@task``, or the
    ``tool#seq`` of older records)."""
    labels = set()
    for tool, seq, detail in task.steps.values_list("tool", "seq", "detail"):
        if StepDetail(detail).untrusted:
            labels |= {taint_label(tool, seq, str(task.pk)), taint_label(tool, seq)}
    return labels


def inherited_taint(task: Task) -> list[str]:
    """The taint a task started with (earlier tasks of its conversation, parent).

    Read as recorded when the task started; for a task from before that was
    recorded, recomputed from the conversation's other tasks.
    """
    if task.inherited_taint is not None:
        return [str(source) for source in task.inherited_taint]
    if task.origin is not None:
        carried = task.origin.get("inherited_taint")
        if isinstance(carried, list):
            return [str(source) for source in carried]
        own = own_taint_labels(task)
        return [s for s in task.tainted_by or [] if s not in own]
    sources: list[str] = []
    earlier = (
        Task.objects.filter(
            conversation_id=task.conversation_id, created_at__lt=task.created_at
        )
        .exclude(pk=task.pk)
        .values_list("tainted_by", flat=True)
    )
    lists = list(earlier)
    if task.parent_id is not None:
        parent = Task.objects.filter(pk=task.parent_id).values("tainted_by").first()
        if parent is not None:
            lists.append(parent["tainted_by"])
    for tainted in lists:
        for source in tainted or []:
            if source not in sources:
                sources.append(source)
    return sources


def trace_document(task: Task) -> dict[str, Any]:
    """The whole trace of ``task`` as one redacted JSON document (docs/api.md)."""
    snapshot = AgentSnapshot.from_json(task.agent_snapshot)
    if task.is_imported:
        # Approvals of an imported trace live on as records in its origin.
        approvals = list((task.origin or {}).get("approvals") or [])
    else:
        approvals = [approval_payload(a) for a in task_approvals(task)]
    task_data = task_payload(task)
    # Extension: what re-running this trace elsewhere needs to decide alike.
    task_data["inherited_taint"] = inherited_taint(task)
    document = {
        "format": FORMAT,
        "task": task_data,
        "conversation": conversation_payload(task.conversation, messages=True),
        "agent": {
            "name": snapshot.name or task.agent.name,
            "model": task.model,
            "instructions": snapshot.instructions,
            "limits": snapshot.limits.to_json() if snapshot.limits else {},
            "tools": [
                {**definition, "version": max(1, int(definition.get("version", 1)))}
                for definition in snapshot.tools
            ],
        },
        "steps": [step_payload(s) for s in task.steps.order_by("seq")],
        "approvals": approvals,
        "audit": [
            audit_event_payload(e)
            for e in AuditEvent.objects.filter(task_id=str(task.pk)).order_by(
                "position"
            )
        ],
        "origin": _public_origin(task.origin),
        # Extensions.
        "exported_at": timezone.now().isoformat(),
        "instance": settings.REACH_PUBLIC_URL,
    }
    redacted: dict[str, Any] = redactor().data(document)
    return redacted


def _public_origin(origin: dict[str, Any] | None) -> dict[str, Any] | None:
    """The origin as exported: the records it carries travel in their own keys."""
    if origin is None:
        return None
    return {k: v for k, v in origin.items() if k not in ("approvals",)}
