"""The approval JSON of docs/api.md "Approval"."""

from __future__ import annotations

from typing import Any

from approvals.models import ApprovalRequest
from registry.payloads import iso


def approval_payload(approval: ApprovalRequest) -> dict[str, Any]:
    # Votes count for the arguments they approved; an edit after a vote resets it.
    approved_by = [
        v.user.get_username()
        for v in approval.votes.all()
        if v.arguments_hash == approval.arguments_hash
    ]
    return {
        "id": str(approval.id),
        "task": str(approval.task_id),
        "step": approval.step.seq,
        "tool": approval.tool,
        "risk": approval.risk,
        "arguments": approval.arguments,
        "proposed_arguments": approval.proposed_arguments,
        "preview": approval.preview,
        "status": approval.status,
        "tainted_by": list(approval.tainted_by or []),
        "approvals_required": approval.approvals_required,
        "approved_by": approved_by,
        "requested_at": iso(approval.requested_at),
        "expires_at": iso(approval.expires_at),
        "decided_by": approval.decided_by.get_username()
        if approval.decided_by
        else None,
        "decided_at": iso(approval.decided_at),
        "reason": approval.reason or None,
        # Extensions.
        # What was decided (``approve``, ``reject``, ``mark_done``, ``retry``);
        # ``status`` alone cannot tell mark done from retry. Null until decided.
        "decision": approval.decision or None,
        "kind": approval.kind,
        "reasons": list(approval.reasons or []),
        "requested_by": approval.requested_by.get_username(),
        "agent": approval.task.agent.name,
        "conversation": str(approval.task.conversation_id),
        "diff": approval.diff,
        # Routing (approvals.routing): the route chosen at creation and why;
        # null and "" when none matched (every approver decides it).
        "route": approval.route.name if approval.route else None,
        "route_reason": approval.route_reason,
        "escalated_at": iso(approval.escalated_at),
    }
