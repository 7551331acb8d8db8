"""The trace document (``reach.trace/v1``): one task with all it did."""

from __future__ import annotations

from typing import Any

from agents.models import Task
from agents.payloads import conversation_payload, iso, step_payload, task_payload
from agents.services.runtime import redactor
from approvals.payloads import approval_payload
from traces.models import AuditEvent

FORMAT = "reach.trace/v1"


def audit_payload(event: AuditEvent) -> dict[str, Any]:
    return {
        "position": event.position,
        "kind": event.kind,
        "actor": event.actor,
        "task": event.task_id or None,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "data": event.data,
        "at": iso(event.at),
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def trace_document(task: Task) -> dict[str, Any]:
    snapshot = task.agent_snapshot or {}
    approvals = task.approvals.select_related(
        "task__agent", "requested_by", "decided_by", "step"
    ).prefetch_related("votes__user")
    document = {
        "format": FORMAT,
        "task": task_payload(task),
        "conversation": conversation_payload(task.conversation, messages=True),
        "agent": {
            "name": snapshot.get("name", task.agent.name),
            "model": task.model,
            "instructions": snapshot.get("instructions", ""),
            "limits": snapshot.get("limits", {}),
            "tools": [
                {**definition, "version": max(1, int(definition.get("version", 1)))}
                for definition in snapshot.get("tools", [])
            ],
        },
        "steps": [step_payload(s) for s in task.steps.order_by("seq")],
        "approvals": [approval_payload(a) for a in approvals],
        "audit": [
            audit_payload(e)
            for e in AuditEvent.objects.filter(task_id=str(task.pk)).order_by("position")
        ],
        "origin": task.origin,
    }
    return redactor().data(document)
