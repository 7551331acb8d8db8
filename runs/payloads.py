"""The JSON shapes of docs/api.md, shared by the API, websockets and trace exports."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from engine.spec import DetailKey
from registry.payloads import iso
from runs.models import Conversation, QueuedMessage, Step, Task

#: A step's keys (docs/api.md "Step"): the first ones in their order there, then
#: the extensions (shapes only grow), then the step's cost. ``step_payload`` and
#: the API schema list these and only these.
STEP_KEYS = (
    "seq",
    "rev",
    "kind",
    "status",
    "tool",
    "call_id",
    "arguments",
    "raw_arguments",
    "proposed_arguments",
    "result",
    "error",
    "attempts",
    "model",
    "request_id",
    "response",
    "usage",
    "idempotency_key",
    "tainted_by",
    "started_at",
    "finished_at",
    "duration_ms",
    # Extensions.
    "error_class",
    "tool_version",
    "parent_seq",
    "call_index",
    "detail",
    # USD at the run's price; null when unknown (no price) or no model call.
    "cost_usd",
    # The acting agent, on runs whose agent may hand off; null on the others.
    "agent",
)


def step_payload(step: Step) -> dict[str, Any]:
    """A step exactly as docs/api.md lists it (every key present)."""
    data = {key: getattr(step, key) for key in STEP_KEYS}
    data["attempts"] = step.attempts or None
    data["tainted_by"] = (
        list(step.tainted_by or []) if step.kind == Step.Kind.TOOL_CALL else None
    )
    data["started_at"] = iso(step.started_at)
    data["finished_at"] = iso(step.finished_at)
    data["detail"] = _public_detail(step.detail or {})
    data["cost_usd"] = usd(step.cost_usd)
    return data


def usd(value: float | None) -> float | None:
    """A cost as the API shows it: rounded to 1e-8 USD; None stays unknown."""
    return round(value, 8) if value is not None else None


def _public_detail(detail: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in detail.items() if k != DetailKey.SIGNATURE}


#: The columns :func:`task_payload` reads.
TASK_PAYLOAD_FIELDS = (
    "id",
    "conversation_id",
    "agent__name",
    "owner__username",
    "model",
    "status",
    "stop_reason",
    "final_answer",
    "answer_json",
    "error_message",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "estimated_calls",
    "cost_usd",
    "intent",
    "source",
    "agent_version",
    "step_count",
    "parent_id",
    "parent_seq",
    "origin",
    "goal",
    "tainted_by",
    "rev",
    "created_at",
    "started_at",
    "finished_at",
)


def task_payload_rows() -> QuerySet[Task]:
    """Tasks with only what :func:`task_payload` reads (their agent's name and
    owner's username joined): no snapshot of tool definitions, no other rows."""
    return Task.objects.select_related("agent", "owner").only(*TASK_PAYLOAD_FIELDS)


def task_payload(task: Task) -> dict[str, Any]:
    parent = None
    if task.parent_id is not None:
        parent = {"task": str(task.parent_id), "seq": task.parent_seq}
    elif task.origin and task.origin.get("parent"):
        parent = task.origin["parent"]
    return {
        "id": str(task.id),
        "conversation": str(task.conversation_id),
        "agent": task.agent.name,
        "model": task.model,
        "status": task.status,
        "stop_reason": task.stop_reason,
        "final_answer": task.final_answer,
        "usage": task.usage,
        # A structured answer, parsed (the agent's answer schema); null otherwise.
        "answer_json": task.answer_json,
        "steps": task.step_count,
        "parent": parent,
        "created_at": iso(task.created_at),
        "finished_at": iso(task.finished_at),
        # Extensions.
        "goal": task.goal,
        "owner": task.owner.get_username(),
        "error": task.error_message or None,
        "started_at": iso(task.started_at),
        "tainted_by": task.tainted_by or [],
        "origin": _origin_summary(task.origin),
        "rev": task.rev,
        # The cost of its own model calls (USD); null: its model has no price.
        "cost_usd": usd(task.cost_usd),
        # Some of its tokens are estimates (the endpoint reported no usage).
        "usage_estimated": task.usage_estimated,
        # The route of the turn; null when the agent has no toolsets.
        "intent": task.intent,
        # What started a run no one typed ("schedule:<id>", "trigger:<id>").
        "source": task.source or None,
        # The number of the agent's version it ran; null before versions.
        "agent_version": task.agent_version,
    }


def _origin_summary(origin: dict[str, Any] | None) -> dict[str, Any] | None:
    """An imported task's origin without the records it carries (the trace has them)."""
    if origin is None:
        return None
    return {k: v for k, v in origin.items() if k not in ("approvals", "audit")}


def conversation_payload(
    conversation: Conversation, *, messages: bool = False
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": str(conversation.id),
        "agent": conversation.agent.name,
        "created_at": iso(conversation.created_at),
        "title": conversation.title,
        "on_busy": conversation.on_busy,
        "webhook_url": conversation.webhook_url or None,
    }
    if messages:
        data["messages"] = [
            {
                "role": m.role,
                "content": m.content,
                "task": str(m.task_id) if m.task_id else None,
                "created_at": iso(m.created_at),
            }
            for m in conversation.messages.all()
        ]
    return data


def queued_payload(queued: QueuedMessage) -> dict[str, Any]:
    """A queued message (docs/api.md "Queued message")."""
    return {
        "id": str(queued.id),
        "conversation": str(queued.conversation_id),
        "content": queued.content,
        "mode": queued.mode,
        "state": queued.state,
        "behind": str(queued.behind_id) if queued.behind_id else None,
        "task": str(queued.task_id) if queued.task_id else None,
        "error": queued.error or None,
        "created_at": iso(queued.created_at),
        "started_at": iso(queued.started_at),
    }
