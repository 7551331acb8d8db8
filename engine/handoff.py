"""Handoffs: an agent hands the run to another agent, as a durable step.

An agent's snapshot lists the agents it may hand the conversation to
(:attr:`~engine.spec.AgentSnapshot.handoffs`). Each is offered to the model as a
tool ``transfer_to_<agent>`` with the target's description. A call of one is
planned like any call (validated; one per turn; the run's handoff limit and
loop rule, :func:`handoff_refusal`), then carried out through the
:class:`Handoffs` port, which checks that the run's user may use the target and
returns the target's snapshot. The step records who handed the run to whom and
that snapshot (``detail["handoff"]``): from the next model call on, the
target's instructions, model and tools take over (:func:`acting_agent`).

What does not change: the run's steps, so its taint (every untrusted result
still taints it), its pending approvals and what its budgets count; and its
limits, which a handoff can only tighten (:func:`run_limits`). A fork copies the
handoff steps, so it resumes with the agent that was acting; a re-run replays
each handoff from its record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Protocol

from .pricing import ModelPrice, snapshot_price
from .spec import (
    AgentSnapshot,
    DetailKey,
    ErrorClass,
    Limits,
    Risk,
    StepKind,
    StepRecord,
    StepStatus,
    StopReason,
    Toolbox,
    ToolKind,
    ToolSpec,
    utcnow,
)

TRANSFER_PREFIX = "transfer_to_"
#: What a transfer takes: an optional reason, shown in the trace.
TRANSFER_PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "reason": {
            "type": "string",
            "description": "Why the conversation goes to this agent (optional).",
        }
    },
    "additionalProperties": False,
}
#: Agent names a transfer's tool name can carry (OpenAI allows 64 characters).
MAX_TARGET_NAME = 64 - len(TRANSFER_PREFIX)


class HandoffRefused(Exception):
    """The handoff may not happen; the message is for the model."""


class Handoffs(Protocol):
    """The port a run hands off through (the Django side checks access)."""

    def transfer(self, *, target: str, source: AgentSnapshot) -> AgentSnapshot:
        """The snapshot of agent ``target`` as the run will use it, or raise
        :class:`HandoffRefused` saying why not."""
        ...

    def toolbox(self, snapshot: AgentSnapshot) -> Toolbox:
        """The tools (specs and handlers) of an agent the run hands off to."""
        ...

    def handed_off(self, step: StepRecord) -> None:
        """Called once a handoff's step (done or refused) is persisted."""
        ...


def transfer_tool_name(agent: str) -> str:
    return TRANSFER_PREFIX + agent


def transfer_target(spec: ToolSpec) -> str | None:
    """The agent a transfer tool hands to (None: not a transfer)."""
    if spec.kind != ToolKind.HANDOFF:
        return None
    return spec.name.removeprefix(TRANSFER_PREFIX)


def transfer_target_of(tool: str | None) -> str | None:
    """The agent a call of the tool named ``tool`` hands to, if it is a transfer."""
    if tool and tool.startswith(TRANSFER_PREFIX):
        return tool.removeprefix(TRANSFER_PREFIX)
    return None


def transfer_specs(snapshot: AgentSnapshot) -> dict[str, ToolSpec]:
    """One ``transfer_to_<agent>`` tool per handoff target of ``snapshot``."""
    specs = {}
    for target in snapshot.handoffs:
        name = transfer_tool_name(target["agent"])
        description = target.get("description") or ""
        specs[name] = ToolSpec(
            name=name,
            description=(
                f"Hand the conversation to the agent '{target['agent']}'"
                + (f": {description}" if description else ".")
                + " It takes over from the next step with its own tools."
            ),
            parameters=TRANSFER_PARAMETERS,
            kind=ToolKind.HANDOFF,
            risk=Risk.READ_ONLY,
        )
    return specs


def with_transfers(toolbox: Toolbox, snapshot: AgentSnapshot) -> Toolbox:
    """``toolbox`` with ``snapshot``'s transfer tools (they have no handler: the
    engine carries them out). A registered tool of the same name is shadowed."""
    if not snapshot.handoffs:
        return toolbox
    return Toolbox(
        specs={**toolbox.specs, **transfer_specs(snapshot)}, handlers=toolbox.handlers
    )


@dataclass(frozen=True)
class HandoffRecord:
    """What a handoff's step records (``detail["handoff"]``)."""

    source: str
    target: str
    snapshot: AgentSnapshot

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.source,
            "to": self.target,
            "snapshot": self.snapshot.to_json(),
        }

    @classmethod
    def of(cls, step: StepRecord) -> HandoffRecord | None:
        """The handoff ``step`` carried out (None: it is no done handoff)."""
        if step.kind is not StepKind.TOOL_CALL or step.status is not (
            StepStatus.SUCCEEDED
        ):
            return None
        data = step.detail.get(DetailKey.HANDOFF)
        if not isinstance(data, Mapping) or not isinstance(
            data.get("snapshot"), Mapping
        ):
            return None
        return cls(
            source=str(data.get("from") or ""),
            target=str(data.get("to") or ""),
            snapshot=AgentSnapshot.from_json(data["snapshot"]),
        )


def handoffs_taken(
    steps: Sequence[StepRecord], *, before_seq: int | None = None
) -> list[tuple[int, HandoffRecord]]:
    """The run's done handoffs (before step ``before_seq``), by seq, in order."""
    taken = []
    for step in steps:
        if DetailKey.HANDOFF not in step.detail:
            continue
        if before_seq is not None and step.seq >= before_seq:
            continue
        record = HandoffRecord.of(step)
        if record is not None:
            taken.append((step.seq, record))
    taken.sort(key=lambda item: item[0])
    return taken


def acting_agent(
    steps: Sequence[StepRecord],
    start: AgentSnapshot,
    *,
    before_seq: int | None = None,
) -> tuple[int, AgentSnapshot]:
    """The agent acting after ``steps`` (before step ``before_seq``): the last
    handoff's target, else ``start``; with the seq of that handoff (0: none)."""
    taken = handoffs_taken(steps, before_seq=before_seq)
    if not taken:
        return 0, start
    seq, record = taken[-1]
    return seq, record.snapshot


def tightened(limits: Limits, other: Limits | None) -> Limits:
    """``limits`` where ``other`` is stricter: the smaller of each budget and
    cap (a handoff never raises one), stopping on an expired approval if either
    does."""
    if other is None:
        return limits
    changes: dict[str, Any] = {}
    for item in fields(Limits):
        mine, theirs = getattr(limits, item.name), getattr(other, item.name)
        if isinstance(mine, bool):
            changes[item.name] = mine or theirs
        elif mine is None:
            changes[item.name] = theirs
        elif theirs is not None:
            changes[item.name] = min(mine, theirs)
    return replace(limits, **changes)


def run_limits(
    start: Limits, steps: Sequence[StepRecord], *, before_seq: int | None = None
) -> Limits:
    """The run's limits after its handoffs: ``start`` tightened by each agent
    that took over."""
    limits = start
    for _, record in handoffs_taken(steps, before_seq=before_seq):
        limits = tightened(limits, record.snapshot.limits)
    return limits


def handoff_refusal(
    target: str,
    *,
    turn_seq: int,
    steps: Sequence[StepRecord],
    limits: Limits,
) -> tuple[ErrorClass, str, StopReason | None] | None:
    """Why a planned transfer to ``target`` must not run, or None.

    ``steps`` are the run's steps with the turn's calls planned so far. One
    handoff per turn; at most ``limits.max_handoffs`` per run; and no handing
    the run along a way it already went (A→B, B→A, then A→B again is a loop):
    those two stop the run with ``handoff_loop``.
    """
    for step in steps:
        if (
            step.kind is StepKind.TOOL_CALL
            and step.parent_seq == turn_seq
            and step.status is StepStatus.RUNNING
            and (step.tool or "").startswith(TRANSFER_PREFIX)
        ):
            return (
                ErrorClass.HANDOFF_REFUSED,
                f"This turn already hands the conversation off ({step.tool}); "
                "one handoff per turn.",
                None,
            )
    taken = [record for _, record in handoffs_taken(steps)]
    if len(taken) >= limits.max_handoffs:
        return (
            ErrorClass.HANDOFF_LOOP,
            f"The run reached its limit of {limits.max_handoffs} handoff"
            f"{'s' if limits.max_handoffs != 1 else ''}; it stops.",
            StopReason.HANDOFF_LOOP,
        )
    if taken:
        current = taken[-1].target
        if any((r.source, r.target) == (current, target) for r in taken):
            return (
                ErrorClass.HANDOFF_LOOP,
                f"The run was already handed from {current} to {target}; handing "
                "it that way again is a loop, so the run stops.",
                StopReason.HANDOFF_LOOP,
            )
    return None


@dataclass(frozen=True)
class Takeover:
    """What the run acts with once the agent a handoff made act takes over."""

    #: The handoff step that made the agent act.
    seq: int
    agent: AgentSnapshot
    #: The agent's own tools, with its transfer tools.
    toolbox: Toolbox
    #: The run's limits, tightened by every agent that took over.
    limits: Limits
    price: ModelPrice | None


def take_over(
    steps: Sequence[StepRecord],
    start: AgentSnapshot,
    *,
    acting_seq: int,
    start_limits: Limits,
    port: Callable[[], Handoffs],
    before_seq: int | None = None,
) -> Takeover | None:
    """The agent the steps say acts (before ``before_seq``) with its tools, price
    and the run's ``start_limits`` tightened by it; None when it is the one
    acting already (since handoff step ``acting_seq``)."""
    seq, acting = acting_agent(steps, start, before_seq=before_seq)
    if seq == acting_seq:
        return None
    return Takeover(
        seq=seq,
        agent=acting,
        toolbox=with_transfers(port().toolbox(acting), acting),
        limits=run_limits(start_limits, steps, before_seq=before_seq),
        price=snapshot_price(acting.extra),
    )


def open_port(
    port: Handoffs | None, factory: Callable[[], Handoffs] | None
) -> Handoffs:
    """The run's port: ``port`` once made, else made by ``factory`` when a run
    first needs it (None: the run cannot hand off)."""
    if port is not None:
        return port
    if factory is None:
        raise HandoffRefused("This run cannot hand off.")
    return factory()


def hand_off(
    step: StepRecord,
    target: str,
    *,
    acting: AgentSnapshot,
    port: Callable[[], Handoffs],
    redact: Callable[[str], str],
) -> StepRecord:
    """Carry out a planned transfer from ``acting`` to ``target``: the port
    checks it and gives the target's snapshot, which the step records; a
    refusal fails the step, and the model reads why (``redact``-ed)."""
    now = utcnow()
    try:
        if target == acting.name:
            raise HandoffRefused(
                f"The agent '{target}' already handles this conversation."
            )
        snapshot = port().transfer(target=target, source=acting)
    except HandoffRefused as refused:
        return step.copy(
            status=StepStatus.FAILED,
            error=redact(str(refused)),
            error_class=ErrorClass.HANDOFF_REFUSED,
            started_at=step.started_at or now,
            finished_at=now,
        )
    record = HandoffRecord(source=acting.name, target=snapshot.name, snapshot=snapshot)
    return step.copy(
        status=StepStatus.SUCCEEDED,
        result={
            "transferred_to": snapshot.name,
            "note": f"The agent '{snapshot.name}' handles the conversation now.",
        },
        started_at=step.started_at or now,
        finished_at=now,
        detail={**step.detail, DetailKey.HANDOFF: record.to_json()},
    )


__all__ = [
    "MAX_TARGET_NAME",
    "TRANSFER_PREFIX",
    "HandoffRecord",
    "HandoffRefused",
    "Handoffs",
    "Takeover",
    "acting_agent",
    "hand_off",
    "handoff_refusal",
    "handoffs_taken",
    "open_port",
    "run_limits",
    "take_over",
    "tightened",
    "transfer_specs",
    "transfer_target",
    "transfer_target_of",
    "transfer_tool_name",
    "with_transfers",
]
