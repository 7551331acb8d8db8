"""The registry's side of a handoff (engine.handoff's ``Handoffs`` port).

A run hands off to an agent only if that agent exists and the run's user may use
it (:mod:`registry.access`, asked at the moment of the handoff, so a change of
access holds for the very next handoff). The target's snapshot is taken then, as
a run's is when it starts: its instructions, model and price, its handoff
targets, and only the tools the run's user may use. Every handoff, done or
refused, is audited once its step is written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from audit.models import AuditKind
from audit.services import audit_task
from engine.handoff import HandoffRecord, HandoffRefused, transfer_target_of
from engine.spec import AgentSnapshot, StepRecord, Toolbox
from registry import access
from registry.models import Agent
from registry.services import (
    agent_snapshot_of,
    snapshot_priced,
    snapshot_routed,
    toolbox_for_snapshot,
    version_resolve,
)


class RegistryHandoffs:
    """Handoffs of one run: its task, its user and its goal."""

    def __init__(
        self,
        *,
        task_id: Any,
        user: Any,
        goal: str,
        wrap: Callable[[Toolbox], Toolbox] | None = None,
    ) -> None:
        self.task_id = task_id
        self.user = user
        self.goal = goal
        # What the run does to every toolbox (an evaluation's stand-ins).
        self.wrap = wrap

    def transfer(self, *, target: str, source: AgentSnapshot) -> AgentSnapshot:
        agent = Agent.objects.filter(name=target).first()
        if agent is None:
            raise HandoffRefused(
                f"There is no agent '{target}' to hand the conversation to; go on "
                "without a handoff."
            )
        if not access.may_use_agent(self.user, agent):
            raise HandoffRefused(
                f"The user of this conversation may not use the agent '{target}', "
                "so it was not handed to it; go on without that agent."
            )
        # The target's version a chat of it would run (registry.versions).
        snapshot = snapshot_priced(
            agent_snapshot_of(agent, user=self.user, version=version_resolve(agent))
        )
        routed, _ = snapshot_routed(snapshot, self.goal)
        return routed

    def toolbox(self, snapshot: AgentSnapshot) -> Toolbox:
        toolbox = toolbox_for_snapshot(snapshot)
        return self.wrap(toolbox) if self.wrap is not None else toolbox

    def handed_off(self, step: StepRecord) -> None:
        data = {
            "seq": step.seq,
            "from": step.agent,
            "to": transfer_target_of(step.tool),
        }
        if HandoffRecord.of(step) is not None:
            audit_task(
                AuditKind.TASK_HANDED_OFF,
                task_id=self.task_id,
                actor="system",
                data=data,
            )
        else:
            audit_task(
                AuditKind.TASK_HANDOFF_REFUSED,
                task_id=self.task_id,
                actor="system",
                data=data | {"reason": step.error},
            )
