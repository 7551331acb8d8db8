"""Deterministic re-run: a recorded run fed back through the current engine.

The recorded model replies stand in for the model and the recorded tool
results (or errors) for the tools, so nothing is executed for real. The
current engine — today's validation, policy, taint, limits and repeated-call
rules, with today's tool definitions — plans the run again in a
:class:`~engine.memory_journal.MemoryJournal`, and the steps it produces are
compared with the recorded ones: kind, tool, canonical arguments, policy
decision, status and error class (ids, timings and usage aside). Recorded
approval decisions are replayed as decisions.

This is the regression check after changing tools or policies: a divergence
names the first step the current engine would take differently. Plain Python:
loading a run from the database is ``traces/replay.py``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .canonical import canonical_hash, canonical_json
from .context import given_notes
from .execution import Executor, ToolError, Untrusted
from .handoff import HandoffRecord, HandoffRefused, transfer_target_of
from .journal import Control, Outcome
from .loop import Engine
from .memory_journal import MemoryJournal
from .model_client import Messages, ModelError, ModelReply, Tools, parse_message
from .pricing import ModelPrice
from .redaction import Redactor
from .routing import Routing
from .spec import (
    FINAL_STEP_STATUSES,
    PLANNING_FAILURES,
    AgentSnapshot,
    CallContext,
    Decision,
    DetailKey,
    ErrorClass,
    Handler,
    HumanDecision,
    Limits,
    StepDetail,
    StepKind,
    StepRecord,
    StepStatus,
    StopReason,
    Toolbox,
    ToolSpec,
    Usage,
)

#: Error classes the engine assigns while planning (the handler never ran).
PLANNING_ERRORS = PLANNING_FAILURES | {ErrorClass.DENIED}

# -- the recorded world ----------


class ReplayModelClient:
    """Answers with the recorded replies, in order; raises recorded model errors."""

    def __init__(self, recorded: Sequence[StepRecord]) -> None:
        self._calls = [s for s in recorded if s.kind is StepKind.MODEL_CALL]
        self._next = 0
        self._lock = threading.Lock()
        # A fork planned its edited call with the forker's arguments, not the
        # model's (traces/fork.py): so does its re-run.
        self._forked = {
            (s.parent_seq, s.call_index): s.arguments
            for s in forked_edits(recorded).values()
        }

    @property
    def exhausted(self) -> bool:
        with self._lock:
            return self._next >= len(self._calls)

    def complete(self, *, messages: Messages, tools: Tools, model: str) -> ModelReply:
        with self._lock:
            if self._next >= len(self._calls):
                raise ModelError(
                    "The recorded run has no further model reply.",
                    kind=ErrorClass.REPLAY_EXHAUSTED,
                    attempts=[],
                )
            step = self._calls[self._next]
            self._next += 1
        if step.detail.get(DetailKey.CUT) and step.response is not None:
            # Cut by a cancel mid-reply: cut again, with what was written.
            content = step.response.get("content")
            raise ModelError(
                step.error or "The reply was cut.",
                kind=ErrorClass.CANCELLED,
                attempts=[],
                partial=ModelReply(
                    message=dict(step.response),
                    content=content,
                    tool_calls=[],
                    finish_reason=None,
                    usage=Usage(),
                    request_id=step.request_id,
                    model=step.model or model,
                    latency_ms=0.0,
                    usage_reported=False,
                ),
            )
        if step.status is StepStatus.FAILED or step.response is None:
            raise ModelError(
                step.error or "The model call failed.",
                kind=step.error_class or ErrorClass.SERVER,
                attempts=[],
            )
        message = dict(step.response)
        content, calls = parse_message(message)
        calls = [
            replace(call, raw_arguments=json.dumps(edit, ensure_ascii=False))
            if (edit := self._forked.get((step.seq, call.index))) is not None
            else call
            for call in calls
        ]
        return ModelReply(
            message=message,
            content=content,
            tool_calls=calls,
            finish_reason=step.detail.get(DetailKey.FINISH_REASON),
            usage=Usage.from_dict(step.usage),
            request_id=step.request_id,
            model=step.model or model,
            latency_ms=0.0,
        )


class ReplayedToolError(ToolError):
    """A recorded tool failure, raised again with its recorded class."""

    def __init__(self, message: str, error_class: str) -> None:
        super().__init__(message)
        self.error_class = error_class


class ReplayTools:
    """Handlers that return what each call returned in the recorded run."""

    def __init__(self, recorded: Sequence[StepRecord]) -> None:
        tool_steps = [s for s in recorded if s.kind is StepKind.TOOL_CALL]
        self._by_key = {s.idempotency_key: s for s in tool_steps if s.idempotency_key}
        self._by_seq = {s.seq: s for s in tool_steps}

    def handler(self, name: str) -> Handler:
        def replay(arguments: dict[str, Any], context: CallContext) -> Any:
            step = self._by_key.get(context.idempotency_key) or self._by_seq.get(
                context.seq
            )
            if step is None or step.tool != name:
                raise ReplayedToolError(
                    f"The recorded run has no call of {name} here.",
                    ErrorClass.NOT_RECORDED,
                )
            if step.status in (
                StepStatus.SUCCEEDED,
                StepStatus.CACHED,
                StepStatus.DEDUPLICATED,
            ):
                if step.detail.get(DetailKey.UNTRUSTED_RESULT):
                    return Untrusted(step.result)
                return step.result
            if step.status is StepStatus.FAILED and (
                step.error_class not in PLANNING_ERRORS
            ):
                return _raise(step)
            raise ReplayedToolError(
                f"The recorded run did not execute {name} at step {step.seq} "
                f"(it ended {step.status.value}).",
                ErrorClass.NOT_RECORDED,
            )

        return replay


class ReplayHandoffs:
    """Handoffs as the recorded run made them: each transfer (in order, to the
    same agent) gives the snapshot its step recorded, or the refusal it
    recorded; the target's tools are today's definitions (``specs_for``) with
    the recorded results as handlers."""

    def __init__(
        self,
        recorded: Sequence[StepRecord],
        tools: ReplayTools,
        specs_for: Callable[[AgentSnapshot], Mapping[str, ToolSpec]],
    ) -> None:
        self._outcomes = [
            s
            for s in sorted(recorded, key=lambda s: s.seq)
            if s.kind is StepKind.TOOL_CALL
            and transfer_target_of(s.tool) is not None
            and (
                HandoffRecord.of(s) is not None
                or s.error_class == ErrorClass.HANDOFF_REFUSED
            )
        ]
        self._tools = tools
        self._specs_for = specs_for

    def transfer(self, *, target: str, source: AgentSnapshot) -> AgentSnapshot:
        for index, step in enumerate(self._outcomes):
            if transfer_target_of(step.tool) != target:
                continue
            del self._outcomes[index]
            record = HandoffRecord.of(step)
            if record is None:
                raise HandoffRefused(step.error or "The handoff was refused.")
            return record.snapshot
        raise HandoffRefused(f"The recorded run did not hand off to '{target}' here.")

    def toolbox(self, snapshot: AgentSnapshot) -> Toolbox:
        specs = dict(self._specs_for(snapshot))
        return Toolbox(
            specs=specs, handlers={name: self._tools.handler(name) for name in specs}
        )

    def handed_off(self, step: StepRecord) -> None:
        """Nothing to record: a re-run writes nothing."""


def _raise(step: StepRecord) -> Any:
    raise ReplayedToolError(
        step.error or "The tool failed.", step.error_class or ErrorClass.TOOL_ERROR
    )


class RecordedInternalError(Exception):
    """The recorded run ended here with an internal error (a bug, not a step)."""


@dataclass
class ReplayJournal(MemoryJournal):
    """A MemoryJournal that ends where the recorded run ended for outside reasons.

    Cancellation, the wall-clock budget and internal errors come from outside
    the record; once the recorded replies are used up (and the turn is done)
    the re-run ends the way the recorded run did instead of asking for more.
    """

    replay_client: ReplayModelClient | None = None
    ended_by: str | None = None
    #: A fork's edited calls, by seq: what the edit recorded of the model's own
    #: call is the record's, as a recorded decision is.
    forked: Mapping[int, StepRecord] = field(default_factory=dict)
    #: The recorded steps, by seq.
    recorded: Mapping[int, StepRecord] = field(default_factory=dict)

    def append(self, steps: Sequence[StepRecord]) -> list[StepRecord]:
        return super().append([self._as_forked(step) for step in steps])

    def _as_forked(self, step: StepRecord) -> StepRecord:
        edit = self.forked.get(step.seq)
        if edit is None or step.kind is not StepKind.TOOL_CALL:
            return step
        return step.copy(
            raw_arguments=edit.raw_arguments,
            proposed_arguments=edit.proposed_arguments,
            detail={**step.detail, DetailKey.FORK: edit.detail[DetailKey.FORK]},
        )

    def _at_recorded_end(self) -> bool:
        """The recorded replies are used up, and no call is left open that the
        recorded run went on to run (it ended before the rest)."""
        return (
            self.replay_client is not None
            and self.replay_client.exhausted
            and all(self._never_ran(step) for step in self._open_tool_steps())
        )

    def _never_ran(self, step: StepRecord) -> bool:
        recorded = self.recorded.get(step.seq)
        return (
            recorded is not None
            and recorded.status is StepStatus.SKIPPED
            and recorded.error_class == ErrorClass.CANCELLED
        )

    def control(self) -> Control:
        if self._at_recorded_end():
            if self.ended_by == StopReason.CANCELLED.value:
                self.cancelled = True
            elif self.ended_by == StopReason.INTERNAL_ERROR.value:
                raise RecordedInternalError()
        return super().control()

    def active_seconds(self) -> float:
        if self.ended_by == StopReason.TIME_BUDGET.value and self._at_recorded_end():
            return float("inf")
        return super().active_seconds()

    def _open_tool_steps(self) -> list[StepRecord]:
        return [
            s
            for s in self.steps
            if s.kind is StepKind.TOOL_CALL and s.status not in FINAL_STEP_STATUSES
        ]

    def finish(
        self,
        reason: StopReason,
        *,
        answer: str | None,
        message: str | None,
        answer_json: Any = None,
    ) -> None:
        if reason is StopReason.CANCELLED:
            # As the database journal does: open calls are skipped, not left open.
            for step in self._open_tool_steps():
                self.decide(
                    step.seq,
                    StepStatus.SKIPPED,
                    error=step.error or "Cancelled before it ran.",
                    error_class=step.error_class or ErrorClass.CANCELLED,
                )
        super().finish(reason, answer=answer, message=message, answer_json=answer_json)


# -- running it again ----------


@dataclass(frozen=True)
class RecordedRun:
    """Everything of a finished run that its re-run depends on."""

    task_id: str
    goal: str
    system: str
    model: str
    steps: list[StepRecord]
    stop_reason: str | None
    history: list[dict[str, str]] = field(default_factory=list)
    inherited_taint: list[str] = field(default_factory=list)
    #: The price the run used (its cost budget stops alike).
    price: ModelPrice | None = None
    #: The toolsets, when the run asked the model which it needed.
    routing: Routing | None = None
    #: The agent it started with (its handoff targets; engine.handoff).
    agent: AgentSnapshot | None = None


@dataclass(frozen=True)
class Divergence:
    seq: int | None
    expected: dict[str, Any] | None
    got: dict[str, Any] | None

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "expected": self.expected, "got": self.got}


@dataclass(frozen=True)
class RerunResult:
    matches: bool
    divergence: Divergence | None
    steps: list[StepRecord]
    stop_reason: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "matches": self.matches,
            "divergence": self.divergence.as_dict() if self.divergence else None,
        }


def rerun(
    run: RecordedRun,
    *,
    specs: Mapping[str, ToolSpec],
    limits: Limits,
    redactor: Redactor | None = None,
    specs_for: Callable[[AgentSnapshot], Mapping[str, ToolSpec]] | None = None,
) -> RerunResult:
    """Feed ``run``'s recorded replies and results through the engine; compare.

    ``specs_for`` gives the tools of an agent the run hands off to (default:
    the definitions its recorded snapshot carries).
    """
    client = ReplayModelClient(run.steps)
    tools = ReplayTools(run.steps)
    executor = Executor(max_threads=4, max_abandoned=4, sleep=lambda _: None)
    engine = Engine(
        model_client=client,
        toolbox=Toolbox(
            specs=dict(specs), handlers={name: tools.handler(name) for name in specs}
        ),
        executor=executor,
        limits=limits,
        redactor=redactor or Redactor(),
        price=run.price,
        routing=run.routing,
        agent=run.agent,
        handoffs=lambda: ReplayHandoffs(
            run.steps, tools, specs_for or (lambda snapshot: snapshot.specs())
        ),
    )
    journal = ReplayJournal(
        # Notes before the first model call were given to the run from outside
        # the loop (what it remembered): the re-run starts from them as it did.
        steps=[s.copy() for s in given_notes(run.steps)],
        task_id=run.task_id,
        goal=run.goal,
        system=run.system,
        model=run.model,
        history=list(run.history),
        inherited_taint=list(run.inherited_taint),
        replay_client=client,
        ended_by=run.stop_reason,
        forked=forked_edits(run.steps),
        recorded={s.seq: s for s in run.steps},
    )
    recorded = journal.recorded
    try:
        # Each pass ends finished or parked; a park is answered from the record.
        for _ in range(len(run.steps) + 2):
            if engine.advance(journal) is Outcome.FINISHED:
                break
            if not replay_decisions(journal, recorded):
                break
    except RecordedInternalError:
        journal.finish(StopReason.INTERNAL_ERROR, answer=None, message=None)
    finally:
        executor.shutdown()
    got_reason = journal.finished[0].value if journal.finished else None
    divergence = first_divergence(run.steps, journal.steps)
    if divergence is None and got_reason != run.stop_reason:
        divergence = Divergence(
            seq=None,
            expected={"stop_reason": run.stop_reason},
            got={"stop_reason": got_reason},
        )
    return RerunResult(
        matches=divergence is None,
        divergence=divergence,
        steps=list(journal.steps),
        stop_reason=got_reason,
    )


def forked_edits(steps: Sequence[StepRecord]) -> dict[int, StepRecord]:
    """The tool calls a fork re-ran with edited arguments, by seq."""
    return {
        s.seq: s
        for s in steps
        if s.kind is StepKind.TOOL_CALL and StepDetail(s.detail).fork.get("edited")
    }


def replay_decisions(
    journal: MemoryJournal, recorded: Mapping[int, StepRecord]
) -> bool:
    """Decide the parked calls as humans decided them in the recorded run.

    Returns False when a parked call has no recorded decision (the recorded
    run did not wait there): the re-run stops and the comparison names it.
    """
    decided = False
    for step in list(journal.steps):
        if step.status is not StepStatus.WAITING_APPROVAL:
            continue
        original = recorded.get(step.seq)
        if (
            original is None
            or original.kind is not StepKind.TOOL_CALL
            or original.tool != step.tool
        ):
            return False
        read = StepDetail(original.detail)
        decision = read.decision
        detail = (
            # The record as it was written, unknown keys included.
            {**step.detail, DetailKey.DECISION: original.detail[DetailKey.DECISION]}
            if decision
            else step.detail
        )
        human = decision.decision if decision else None
        if human is HumanDecision.APPROVE:
            arguments = step.arguments
            changes: dict[str, Any] = {}
            if decision and decision.edited and original.proposed_arguments is not None:
                arguments = original.arguments
                changes = {"arguments": arguments, "proposed_arguments": step.arguments}
            detail = {**detail, DetailKey.APPROVED_HASH: canonical_hash(arguments)}
            journal.decide(step.seq, StepStatus.APPROVED, detail=detail, **changes)
        elif human is HumanDecision.MARK_DONE:
            journal.decide(
                step.seq, StepStatus.SUCCEEDED, result=original.result, detail=detail
            )
        elif original.status is StepStatus.REJECTED:
            reason = read.rejection_reason
            journal.decide(
                step.seq,
                StepStatus.REJECTED,
                detail={**detail, DetailKey.REASON: reason},
            )
        elif original.status is StepStatus.EXPIRED:
            journal.decide(step.seq, StepStatus.EXPIRED)
        elif (
            original.status is StepStatus.SKIPPED
            and original.error_class == ErrorClass.CANCELLED
        ):
            # The run was cancelled while this call waited.
            journal.decide(
                step.seq,
                StepStatus.SKIPPED,
                error=original.error,
                error_class=ErrorClass.CANCELLED,
            )
            journal.cancelled = True
        else:
            return False
        decided = True
    return decided


# -- comparing ----------


def policy_decision(step: StepRecord) -> str | None:
    """What the policy decided for a tool call: execute, approve or deny."""
    if step.kind is not StepKind.TOOL_CALL:
        return None
    if step.status is StepStatus.DENIED:
        return Decision.DENY.value
    if StepDetail(step.detail).waited_for_approval or step.status in (
        StepStatus.WAITING_APPROVAL,
        StepStatus.APPROVED,
        StepStatus.REJECTED,
        StepStatus.EXPIRED,
    ):
        return Decision.APPROVE.value
    if step.arguments is not None:
        return Decision.EXECUTE.value
    return None


def step_signature(step: StepRecord) -> dict[str, Any]:
    """The part of a step a re-run must reproduce (ids, timings, usage aside).

    A cache hit counts as a success: whether a result was cached depends on
    other runs, not on this one.
    """
    status = step.status
    if status is StepStatus.CACHED:
        status = StepStatus.SUCCEEDED
    signature: dict[str, Any] = {
        "kind": step.kind.value,
        "status": status.value,
        "error_class": step.error_class,
    }
    if step.kind is StepKind.TOOL_CALL:
        signature.update(
            tool=step.tool,
            arguments=step.arguments,
            proposed_arguments=step.proposed_arguments,
            decision=policy_decision(step),
        )
    elif step.kind is StepKind.NOTE:
        signature["reason"] = step.detail.get(DetailKey.REASON)
    elif step.kind is StepKind.COMPACTION:
        signature["replaced"] = sorted(
            int(seq) for seq in StepDetail(step.detail).replaced
        )
    return signature


def first_divergence(
    expected: Sequence[StepRecord], got: Sequence[StepRecord]
) -> Divergence | None:
    """The first seq whose signatures differ (or that only one side has)."""
    want = {s.seq: s for s in expected}
    have = {s.seq: s for s in got}
    for seq in sorted(set(want) | set(have)):
        a = step_signature(want[seq]) if seq in want else None
        b = step_signature(have[seq]) if seq in have else None
        if a is None or b is None or canonical_json(a) != canonical_json(b):
            return Divergence(seq=seq, expected=a, got=b)
    return None
