"""Gateway calls: which tools a user may call, starting one call, reading its outcome.

A call is started as an ordinary task (``runs.services.task_start``) in a
conversation of its own, marked in its agent snapshot so the worker answers it
with :class:`gateway.model_client.GatewayModel`. Its own conversation, because a
conversation runs one task at a time and an MCP client may call in parallel.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from approvals.models import ApprovalRequest
from engine.canonical import dumps
from engine.spec import (
    FINAL_TASK_STATUSES,
    AgentSnapshot,
    DecisionRecord,
    StepDetail,
    StepKind,
    StepStatus,
    TaskStatus,
)
from gateway.model_client import GATEWAY_MODEL, GatewayCall
from gateway.models import McpCall
from gateway.selectors import carried_taint
from infra import runtime
from registry.access import may_use_agent
from registry.models import Agent
from registry.services import agent_snapshot_of, version_resolve
from runs import selectors
from runs.api.auth import token_user
from runs.models import Step, Task
from runs.ports import GATEWAY_KEY
from runs.services import conversation_create, task_start

#: Step statuses whose result is what the tool answered (the ledger's included).
_ANSWERED = frozenset(
    {StepStatus.SUCCEEDED, StepStatus.CACHED, StepStatus.DEDUPLICATED}
)


class GatewayError(Exception):
    """A request the gateway refuses before any task starts (message for the client)."""


def gateway_user(*, token: str | None = None, username: str | None = None) -> Any:
    """The user behind an API token, or an active user by name (stdio, local only)."""
    if token:
        found = token_user(token)
        if found is None:
            raise GatewayError("The token is unknown, revoked or its user inactive.")
        return found[0]
    if username:
        user = (
            get_user_model().objects.filter(username=username, is_active=True).first()
        )
        if user is None:
            raise GatewayError(f"No active user named '{username}'.")
        return user
    raise GatewayError("Name a user or give a token.")


def gateway_agent(*, name: str | None = None, user: Any = None) -> Agent:
    """The agent whose tools and policy the gateway serves: the named one or the
    default, as a new conversation would talk to; with ``user``, one that user
    may use (registry.access), as the chat and the API require."""
    agent = (
        Agent.objects.filter(name=name).first()
        if name
        else selectors.default_agent(user)
    )
    if agent is None:
        raise GatewayError(
            f"No agent named '{name}'." if name else "No agent is configured."
        )
    if user is not None and not may_use_agent(user, agent):
        raise GatewayError(
            f"You may not use the agent '{agent.name}'; an admin can give you access."
        )
    return agent


def gateway_tools(*, agent: Agent, user: Any = None) -> list[dict[str, Any]]:
    """The tool definitions a run of ``agent`` is offered (enabled, confirmed);
    with ``user``, only those that user may use (registry.access). Those of the
    version its runs run (registry.versions), as the call's snapshot will be."""
    snapshot = agent_snapshot_of(agent, user=user, version=version_resolve(agent))
    return [dict(d) for d in snapshot.tools]


def gateway_call_start(
    *,
    user: Any,
    agent: Agent,
    tool: str,
    arguments: Mapping[str, Any],
    session: str = "",
) -> Task:
    """Start one gateway call as a task of ``user`` in MCP ``session`` (blank:
    the client keeps none); the worker runs it after commit.

    It starts tainted by what earlier calls of the session, and of the user
    within the taint window, read untrusted (:func:`carried_taint`), as a chat
    turn starts tainted by its conversation's earlier turns.
    """
    # As a chat message is: stored secrets are masked before anything records the
    # call (the snapshot, the goal, the step), and the call is what was recorded.
    arguments = runtime.redactor().data(dict(arguments))
    call = GatewayCall(
        tool=tool, arguments=dict(arguments), call_id=f"mcp_{uuid.uuid4().hex[:16]}"
    )
    goal = f"MCP call: {tool} {dumps(dict(arguments))}"
    limit = settings.REACH_MAX_MESSAGE_CHARS
    if len(goal) > limit:
        goal = goal[: limit - 1] + "…"
    with transaction.atomic():
        conversation = conversation_create(owner=user, agent=agent)
        task = task_start(
            conversation=conversation, content=goal, model=GATEWAY_MODEL, routed=False
        )
        # Inside task_start's transaction still: the worker is enqueued on commit,
        # so it never sees the task without its call.
        snapshot = AgentSnapshot.from_json(task.agent_snapshot)
        snapshot = snapshot.replace(
            extra={**snapshot.extra, GATEWAY_KEY: call.to_json()}
        )
        task.agent_snapshot = snapshot.to_json()
        taint = carried_taint(user=user, session=session, now=timezone.now())
        if taint:
            task.tainted_by = list(dict.fromkeys([*(task.tainted_by or []), *taint]))
            task.inherited_taint = list(task.tainted_by)
        Task.objects.filter(pk=task.pk).update(
            agent_snapshot=task.agent_snapshot,
            tainted_by=task.tainted_by,
            inherited_taint=task.inherited_taint,
        )
        McpCall.objects.create(task=task, user=user, session=session)
    return task


@dataclass(frozen=True)
class CallOutcome:
    """Where one gateway call stands, as the MCP handler answers it."""

    task_id: str
    status: str
    #: The task reached a final status: nothing about this call changes any more.
    done: bool
    is_error: bool
    text: str
    result: Any = None
    approval_id: str | None = None
    #: While parked: when the approval expires (the bound of the client's wait).
    approval_expires_at: datetime | None = None
    #: While parked: the untrusted results that made the call need approval.
    tainted_by: tuple[str, ...] = ()

    def meta(self) -> dict[str, Any]:
        data: dict[str, Any] = {"task": self.task_id, "status": self.status}
        if self.approval_id:
            data["approval"] = self.approval_id
        if self.tainted_by:
            data["tainted_by"] = list(self.tainted_by)
        return data


def gateway_call_outcome(*, task_id: Any) -> CallOutcome:
    """The call's outcome now: final, parked for approval, or still running."""
    task = Task.objects.get(pk=task_id)
    step = (
        Step.objects.filter(task=task, kind=StepKind.TOOL_CALL).order_by("seq").first()
    )
    tid = str(task.pk)
    final = task.status in FINAL_TASK_STATUSES
    if step is not None and step.status == StepStatus.WAITING_APPROVAL and not final:
        approval = (
            ApprovalRequest.objects.filter(
                step=step, status=ApprovalRequest.Status.PENDING
            )
            .order_by("-requested_at")
            .first()
        )
        tainted = tuple(step.tainted_by or ())
        return CallOutcome(
            task_id=tid,
            status=TaskStatus.WAITING_APPROVAL.value,
            done=False,
            is_error=True,
            text=(
                f"The call of {step.tool} waits for a human's approval"
                + (f" (approval {approval.pk})" if approval else "")
                + f"; task {tid}."
                + (
                    " It needs one because untrusted content was read before it"
                    f" (in this MCP session or just before): {', '.join(tainted)}."
                    if tainted
                    else ""
                )
            ),
            approval_id=str(approval.pk) if approval else None,
            approval_expires_at=approval.expires_at if approval else None,
            tainted_by=tainted,
        )
    if not final:
        return _outcome(task, f"The call is still running; task {tid}.", done=False)
    if step is None:
        # Stopped before any call was planned (cancelled, a budget, an error).
        reason = task.error_message or task.stop_reason or task.status
        return _outcome(task, f"The call did not run: {reason}.")
    detail = step.detail or {}
    if step.status in _ANSWERED:
        return _outcome(task, dumps(step.result), is_error=False, result=step.result)
    if step.status == StepStatus.REJECTED:
        read = StepDetail(detail)
        decision = read.decision or DecisionRecord()
        reason = read.rejection_reason or ""
        who = decision.by
        text = f"Rejected by {who}" if who else "Rejected"
        return _outcome(
            task,
            f"{text}: {reason}" if reason else f"{text}.",
            approval_id=decision.approval,
        )
    if step.status == StepStatus.EXPIRED:
        return _outcome(
            task, "The approval expired before anyone decided; the call did not run."
        )
    # Failed (validation, the tool's own error), denied by policy, or skipped.
    return _outcome(
        task, f"{step.status}: {step.error or step.error_class or 'it did not succeed'}"
    )


def _outcome(
    task: Task,
    text: str,
    *,
    done: bool = True,
    is_error: bool = True,
    result: Any = None,
    approval_id: str | None = None,
) -> CallOutcome:
    """The call's outcome at ``task``'s current status; by default a final error."""
    return CallOutcome(
        task_id=str(task.pk),
        status=task.status,
        done=done,
        is_error=is_error,
        text=text,
        result=result,
        approval_id=approval_id,
    )


def wait_bound_s(*, task_id: Any) -> float:
    """How long a client's call may wait for a running (not parked) task: the run's
    time budget, and a little more for the queue."""
    task = Task.objects.select_related("agent").get(pk=task_id)
    snapshot = AgentSnapshot.from_json(task.agent_snapshot)
    limits = snapshot.limits or task.agent.limits()
    return float(limits.time_budget_s) + 30.0


def max_wait_s() -> float | None:
    """An operator's cap on any wait (``REACH_MCP_MAX_WAIT_S``); None: the TTL."""
    value = float(settings.REACH_MCP_MAX_WAIT_S)
    return value if value > 0 else None
