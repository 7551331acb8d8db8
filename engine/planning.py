"""Planning: what becomes of each call a model proposes, decided before any runs.

A model turn's calls are planned together, up front, and persisted with the
model's reply: each call is validated against its tool's JSON Schema, the policy
decides EXECUTE, APPROVE or DENY (the strictest of the tool's risk tier, its
approval setting and the task's taint; rules go through the safe evaluator,
never ``eval``), and the run's limits apply — the cap on tool calls, repeated-call
detection (first a hint to re-plan, then a stop) and the circuit breaker.

:class:`Planner` is the one public way to plan: a live run plans each turn with
it (``engine/loop.py``) and a fork re-plans the calls from step N with it
(``traces/fork.py``). The checks of a tool definition (name, parameters schema,
policy settings) live here too: they are the rules planning relies on.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError

from .canonical import call_signature, canonical_hash
from .formats import FORMAT_CHECKER, expected
from .handoff import handoff_refusal, transfer_target
from .json_input import json_problem, loads_strict
from .redaction import Redactor
from .safe_eval import EvaluationError, evaluate_rule
from .spec import (
    PLANNING_FAILURES,
    ApprovalMode,
    ApprovalRecord,
    Decision,
    DetailKey,
    ErrorClass,
    Limits,
    Risk,
    StepDetail,
    StepKind,
    StepRecord,
    StepStatus,
    StopReason,
    ToolCall,
    ToolKind,
    ToolSpec,
    taint_label,
    utcnow,
)

# -- tool definitions ---------------------------------------------------------------

TOOL_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{1,63}$")


def check_tool_name(name: str) -> None:
    if not TOOL_NAME_RE.match(name or ""):
        raise ValueError(
            "Tool names are 2-64 characters of lowercase letters, digits and "
            "underscores, starting with a letter (verb_noun, e.g. search_notes)."
        )


def check_parameters_schema(schema: Any) -> None:
    """Raise ValueError unless ``schema`` is a valid draft 2020-12 object schema."""
    if not isinstance(schema, Mapping):
        raise ValueError("Parameters must be a JSON object (a JSON Schema).")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        path = "/".join(str(p) for p in exc.path)
        where = f" at /{path}" if path else ""
        raise ValueError(
            f"Not a valid JSON Schema (draft 2020-12){where}: {exc.message}"
        ) from exc
    if schema.get("type") != "object":
        raise ValueError(
            'The parameters schema must have "type": "object" at its root.'
        )
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise ValueError('"properties" must be an object.')
    for name in schema.get("required", []):
        if name not in properties:
            raise ValueError(f'Required parameter "{name}" is not in "properties".')


class DefinitionError(ValueError):
    """Policy settings that contradict each other; ``field`` is the one to change."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


def check_definition(spec: ToolSpec) -> None:
    """Raise :class:`DefinitionError` for contradictory policy settings."""
    if spec.risk is Risk.IRREVERSIBLE and spec.approval is ApprovalMode.NEVER:
        raise DefinitionError(
            "An irreversible tool always needs approval: approval cannot be 'never'.",
            field="approval",
        )
    if spec.approval is ApprovalMode.RULE and not (spec.approval_rule or "").strip():
        raise DefinitionError(
            "Approval 'rule' needs a rule, e.g. amount > 100.", field="approval_rule"
        )
    if spec.approvals_required not in (1, 2):
        raise DefinitionError(
            "approvals_required is 1 or 2.", field="approvals_required"
        )


# -- arguments ----------------------------------------------------------------------


class InvalidArguments(ValueError):
    """The model's arguments do not fit the tool; the message is for the model."""

    def __init__(
        self, message: str, error_class: str = ErrorClass.INVALID_ARGUMENTS
    ) -> None:
        super().__init__(message)
        self.error_class = error_class


def parse_arguments(raw: str | None) -> dict[str, Any]:
    """Parse the model's argument string; raise InvalidArguments with a hint."""
    text = (raw or "").strip() or "{}"
    try:
        value = loads_strict(text)
    except json.JSONDecodeError as exc:
        raise InvalidArguments(
            f"The arguments are not valid JSON ({exc.msg} at position {exc.pos}). "
            "Send the arguments as one JSON object.",
            ErrorClass.INVALID_JSON,
        ) from exc
    except ValueError as exc:  # NaN, a number out of range, nested too deeply
        raise InvalidArguments(
            f"The arguments are not valid JSON ({exc}). Send the arguments as one "
            "JSON object.",
            ErrorClass.INVALID_JSON,
        ) from exc
    if not isinstance(value, dict):
        raise InvalidArguments(
            'The arguments must be a JSON object, e.g. {"name": value}.',
            ErrorClass.INVALID_JSON,
        )
    # Text no database stores would fail the call's step, not just the call.
    found = json_problem(value)
    if found is not None:
        raise InvalidArguments(f"{found[0]} Send plain text.")
    return value


def validate_arguments(schema: Mapping[str, Any], arguments: dict[str, Any]) -> None:
    """Raise InvalidArguments listing every way ``arguments`` break ``schema``.

    ``format`` is asserted (:mod:`engine.formats`): a value that is not the
    date, address or id its parameter names fails here, before anything runs.
    """
    validator = Draft202012Validator(schema, format_checker=FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(arguments), key=_error_sort_key)
    if not errors:
        return
    messages = []
    for error in errors[:5]:
        path = "/".join(str(p) for p in error.absolute_path)
        messages.append(f"{path or 'arguments'}: {_message(error)}")
    properties = schema.get("properties", {})
    hint = ""
    if isinstance(properties, Mapping) and properties:
        hint = (
            " Expected parameters: "
            + ", ".join(
                f"{name} ({_describe(spec)})" for name, spec in properties.items()
            )
            + "."
        )
    raise InvalidArguments("Invalid arguments: " + "; ".join(messages) + "." + hint)


def _error_sort_key(error: ValidationError) -> str:
    return "/".join(str(p) for p in error.absolute_path)


def _message(error: ValidationError) -> str:
    """jsonschema's message, or for a format what a valid value looks like."""
    if error.validator == "format":
        looks = expected(str(error.validator_value))
        if looks is not None:
            value = error.instance
            shown = _short(value) if isinstance(value, str) else repr(value)
            return f"{shown!r} is not a valid {error.validator_value}: expected {looks}"
    return str(error.message)


def _describe(spec: Any) -> str:
    if isinstance(spec, Mapping):
        kind = str(spec.get("type", "any"))
        name = spec.get("format")
        if isinstance(name, str) and expected(name) is not None:
            return f"{kind}, {name}"
        return kind
    return "any"


# -- policy -------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class PolicyDecision:
    decision: Decision
    reasons: tuple[str, ...] = ()
    tainted_by: tuple[str, ...] = field(default_factory=tuple)


def decide(
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    *,
    tainted_by: Sequence[str] = (),
) -> PolicyDecision:
    """Decide EXECUTE, APPROVE or DENY for one validated call."""
    reasons: list[str] = []
    if spec.risk is Risk.IRREVERSIBLE:
        reasons.append("irreversible action")
    if spec.approval is ApprovalMode.ALWAYS:
        reasons.append("this tool always needs approval")
    elif spec.approval is ApprovalMode.RULE and spec.approval_rule:
        try:
            if evaluate_rule(spec.approval_rule, dict(arguments)):
                reasons.append(f"rule matched: {spec.approval_rule}")
        except EvaluationError as exc:
            # A broken rule must fail closed: ask a human.
            reasons.append(f"approval rule could not be evaluated ({exc})")
    taint = tuple(tainted_by)
    if taint and (spec.risk is not Risk.READ_ONLY or spec.leaves_house):
        reasons.append("task read untrusted content: " + ", ".join(taint))
    if reasons:
        return PolicyDecision(Decision.APPROVE, tuple(reasons), taint)
    return PolicyDecision(Decision.EXECUTE, (), ())


def render_preview(spec: ToolSpec, arguments: Mapping[str, Any]) -> str:
    """A one-line, human-readable summary of the call for the approval card."""
    template = spec.preview_template.strip()
    if template:
        # Plain {name} substitution: no format-spec mini-language, no attributes.
        return _PLACEHOLDER.sub(
            lambda m: _short(arguments.get(m.group(1), "?")), template
        )[:300]
    parts = ", ".join(f"{key}={_short(value)}" for key, value in arguments.items())
    return f"{spec.name}({parts})"[:300]


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "…"


# -- the turn -----------------------------------------------------------------------


def taint_sources(
    steps: Sequence[StepRecord], inherited: Sequence[str] = (), task_id: str = ""
) -> list[str]:
    """What taints the run: what it inherited, then its untrusted results."""
    sources = list(inherited)
    for step in steps:
        if step.kind is StepKind.TOOL_CALL and StepDetail(step.detail).untrusted:
            # A step a fork copied is its parent's record: the parent's label.
            copied = step.detail.get(DetailKey.COPIED_FROM) or {}
            label = taint_label(
                step.tool,
                int(copied.get("seq", step.seq)),
                str(copied.get("task", task_id)),
            )
            if label not in sources:
                sources.append(label)
    return sources


def circuit_open(tool: str, steps: Sequence[StepRecord], limit: int) -> bool:
    """True after ``limit`` failures of ``tool`` in a row (planning failures aside)."""
    streak = 0
    for step in steps:
        if step.kind is not StepKind.TOOL_CALL or step.tool != tool:
            continue
        if step.status is StepStatus.FAILED and (
            step.error_class not in PLANNING_FAILURES
        ):
            streak += 1
        elif step.status in (StepStatus.SUCCEEDED, StepStatus.CACHED):
            streak = 0
    return streak >= limit


#: Statuses of calls that ran, or may still run: what a tool's
#: ``max_calls_per_run`` counts (refused, rejected, deduplicated and skipped
#: calls did not run).
_RUN_OR_RUNNING = frozenset(
    {
        StepStatus.SUCCEEDED,
        StepStatus.CACHED,
        StepStatus.FAILED,
        StepStatus.RUNNING,
        StepStatus.WAITING_APPROVAL,
        StepStatus.APPROVED,
    }
)
#: Failures of calls that never reached their handler.
_NEVER_RAN = PLANNING_FAILURES | {
    ErrorClass.NO_HANDLER,
    ErrorClass.APPROVAL_MISMATCH,
}


def counts_toward_tool_limit(step: StepRecord) -> bool:
    """Whether ``step`` is a call its tool's ``max_calls_per_run`` counts."""
    return (
        step.kind is StepKind.TOOL_CALL
        and step.status in _RUN_OR_RUNNING
        and step.error_class not in _NEVER_RAN
    )


#: The stop a skipped call flags on its turn.
_STOPS: dict[str, StopReason] = {
    ErrorClass.MAX_TOOL_CALLS: StopReason.MAX_TOOL_CALLS,
    ErrorClass.REPEATED_CALL: StopReason.REPEATED_CALL,
    ErrorClass.HANDOFF_LOOP: StopReason.HANDOFF_LOOP,
}


def _flagged_stop(step: StepRecord) -> StopReason | None:
    if step.status is not StepStatus.SKIPPED or step.error_class is None:
        return None
    return _STOPS.get(step.error_class)


@dataclass
class TurnPlan:
    """The planned steps of one model turn's calls, and whether the run stops."""

    calls: list[StepRecord]
    notes: list[StepRecord]
    #: What the turn's model_call step flags in its detail (``DetailKey.STOP``).
    stop: StopReason | None = None

    @property
    def steps(self) -> list[StepRecord]:
        return [*self.calls, *self.notes]

    def flag(self, turn: StepRecord) -> None:
        """Record the plan's stop on the turn's model_call step (or clear it)."""
        if self.stop is None:
            turn.detail.pop(DetailKey.STOP, None)
        else:
            turn.detail[DetailKey.STOP] = self.stop.value


@dataclass(frozen=True)
class Planner:
    """Plans the calls of a model turn against a toolbox's specs and the limits."""

    specs: Mapping[str, ToolSpec]
    limits: Limits = field(default_factory=Limits)
    redactor: Redactor = field(default_factory=Redactor)

    def plan_turn(
        self,
        turn: StepRecord,
        calls: Sequence[ToolCall],
        *,
        steps: Sequence[StepRecord],
        task_id: str,
        inherited_taint: Sequence[str] = (),
        now: dt.datetime | None = None,
    ) -> TurnPlan:
        """One step per call of ``turn`` (the model_call step), then any notes.

        ``steps`` are the steps recorded before these calls: the run so far, and
        for a fork the copied steps (earlier calls of the same turn among them).
        A call's seq is ``turn.seq + 1 + call.index``; notes take the seqs after
        the turn's calls. ``now`` is the planning time (a deduplicated call
        finishes then).
        """
        now = now or utcnow()
        tool_steps = [s for s in steps if s.kind is StepKind.TOOL_CALL]
        taint = taint_sources(steps, inherited_taint, task_id)
        successes: dict[str, StepRecord] = {}
        rejected: dict[str, StepRecord] = {}
        repeats: dict[str, int] = {}
        stop: StopReason | None = None
        for s in tool_steps:
            signature = StepDetail(s.detail).signature
            if signature and s.status in (StepStatus.SUCCEEDED, StepStatus.CACHED):
                successes[signature] = s
            elif signature and s.status is StepStatus.REJECTED:
                rejected.setdefault(signature, s)
            elif signature and (
                s.status is StepStatus.DEDUPLICATED
                or s.error_class == ErrorClass.ALREADY_REJECTED
            ):
                repeats[signature] = repeats.get(signature, 0) + 1
            if s.parent_seq == turn.seq:
                stop = _flagged_stop(s) or stop
        count = len(tool_steps)
        calls_of: dict[str, int] = {}
        for s in tool_steps:
            if counts_toward_tool_limit(s):
                calls_of[s.tool or ""] = calls_of.get(s.tool or "", 0) + 1
        planned: list[StepRecord] = []
        repeated: list[tuple[StepRecord, StepRecord]] = []
        for call in calls:
            step = self.plan_call(call, taint=taint)
            step.seq = turn.seq + 1 + call.index
            step.parent_seq = turn.seq
            step.idempotency_key = f"{task_id}:{turn.seq}:{call.index}"
            count += 1
            signature = StepDetail(step.detail).signature
            spec = self.specs.get(step.tool or "")
            target = (
                transfer_target(spec)
                if spec is not None and spec.kind == ToolKind.HANDOFF
                else None
            )
            if count > self.limits.max_tool_calls and step.status is StepStatus.RUNNING:
                step.status = StepStatus.SKIPPED
                step.error = (
                    f"Tool call limit reached ({self.limits.max_tool_calls} per task)."
                )
                step.error_class = ErrorClass.MAX_TOOL_CALLS
                stop = StopReason.MAX_TOOL_CALLS
            elif target is not None:
                # A handoff is never deduplicated: handing back and forth is
                # what the loop rule judges.
                refusal = (
                    handoff_refusal(
                        target,
                        turn_seq=turn.seq,
                        steps=[*steps, *planned],
                        limits=self.limits,
                    )
                    if step.status is StepStatus.RUNNING
                    else None
                )
                if refusal is not None:
                    step.status = StepStatus.SKIPPED
                    step.error_class, step.error, flagged = refusal
                    stop = flagged or stop
            elif (
                signature
                and signature in successes
                and step.status in (StepStatus.RUNNING, StepStatus.WAITING_APPROVAL)
            ):
                earlier = successes[signature]
                if repeats.get(signature, 0) >= 1:
                    step.status = StepStatus.SKIPPED
                    step.error = "The same call was repeated again; the task stops."
                    step.error_class = ErrorClass.REPEATED_CALL
                    stop = StopReason.REPEATED_CALL
                else:
                    repeats[signature] = repeats.get(signature, 0) + 1
                    step.status = StepStatus.DEDUPLICATED
                    step.result = earlier.result
                    step.detail.pop(DetailKey.APPROVAL, None)
                    step.detail[DetailKey.SAME_AS_SEQ] = earlier.seq
                    step.finished_at = now
                    repeated.append((step, earlier))
            elif (
                signature
                and signature in rejected
                and step.status is StepStatus.WAITING_APPROVAL
            ):
                # An approver said no to this very call: nobody is asked again
                # (the model of a small agent otherwise repeats it until the
                # step limit, each time a new request in the queue); a second
                # such repeat ends the task as any repeated call does.
                earlier = rejected[signature]
                step.status = StepStatus.SKIPPED
                step.detail.pop(DetailKey.APPROVAL, None)
                if repeats.get(signature, 0) >= 1:
                    step.error = (
                        "The same rejected call was repeated again; the task stops."
                    )
                    step.error_class = ErrorClass.REPEATED_CALL
                    stop = StopReason.REPEATED_CALL
                else:
                    repeats[signature] = repeats.get(signature, 0) + 1
                    step.error_class = ErrorClass.ALREADY_REJECTED
                    step.error = (
                        f"An approver already rejected this same call (step "
                        f"{earlier.seq}); it was not asked again and did not run. "
                        "Change your plan or answer now."
                    )
            elif (
                step.status in (StepStatus.RUNNING, StepStatus.WAITING_APPROVAL)
                and spec is not None
                and spec.max_calls_per_run > 0
                and calls_of.get(spec.name, 0) >= spec.max_calls_per_run
            ):
                # Refused before it runs (and before anyone is asked to approve).
                limit = spec.max_calls_per_run
                step.status = StepStatus.SKIPPED
                step.detail.pop(DetailKey.APPROVAL, None)
                step.error = (
                    f"{spec.name} may be called at most {limit} "
                    f"time{'s' if limit != 1 else ''} per run; this call was refused "
                    "and did not run. Use the results you have, another tool, or "
                    "answer now."
                )
                step.error_class = ErrorClass.TOOL_CALL_LIMIT
            elif step.status is StepStatus.RUNNING and circuit_open(
                step.tool or "",
                [*steps, *planned],
                self.limits.consecutive_failure_limit,
            ):
                step.status = StepStatus.SKIPPED
                step.error = (
                    f"{step.tool} failed {self.limits.consecutive_failure_limit} times "
                    "in a row and is unavailable for this task. Use another tool or "
                    "answer with what you have."
                )
                step.error_class = ErrorClass.CIRCUIT_OPEN
            if step.status in (StepStatus.RUNNING, StepStatus.WAITING_APPROVAL):
                calls_of[step.tool or ""] = calls_of.get(step.tool or "", 0) + 1
            planned.append(step)
        first_free = max([turn.seq, *(s.seq for s in steps), *(s.seq for s in planned)])
        notes = [
            _repeat_note(step, earlier, first_free + 1 + number, now)
            for number, (step, earlier) in enumerate(repeated)
        ]
        return TurnPlan(calls=planned, notes=notes, stop=stop)

    def plan_call(self, call: ToolCall, *, taint: Sequence[str] = ()) -> StepRecord:
        """One call on its own: known tool, valid arguments, the policy's decision.

        The step's seq, parent and idempotency key are left to the caller
        (:meth:`plan_turn` sets them); so are the run's limits.
        """
        step = StepRecord(
            seq=0,
            kind=StepKind.TOOL_CALL,
            status=StepStatus.RUNNING,
            tool=call.name,
            call_id=call.call_id,
            call_index=call.index,
            raw_arguments=self.redactor.text(call.raw_arguments),
        )
        spec = self.specs.get(call.name)
        if spec is None:
            step.status = StepStatus.FAILED
            # The same words whether no such tool exists or the run's user may not
            # use it: the observation names only the tools this run offers.
            available = ", ".join(sorted(self.specs))
            step.error = "No tool of that name is available in this run. " + (
                f"Available tools: {available}." if available else "It has no tools."
            )
            step.error_class = ErrorClass.UNKNOWN_TOOL
            return step
        step.tool_version = spec.version
        try:
            arguments = parse_arguments(call.raw_arguments)
            validate_arguments(spec.parameters, arguments)
        except InvalidArguments as exc:
            step.status = StepStatus.FAILED
            step.error = str(exc)
            step.error_class = exc.error_class
            return step
        # What is persisted, shown to an approver, hashed and run is one object.
        arguments = self.redactor.data(arguments)
        step.arguments = arguments
        step.detail[DetailKey.SIGNATURE] = call_signature(spec.name, arguments)
        policy = decide(spec, arguments, tainted_by=taint)
        step.tainted_by = list(policy.tainted_by) or (
            list(taint) if spec.risk is not Risk.READ_ONLY else []
        )
        if policy.decision is Decision.APPROVE:
            step.status = StepStatus.WAITING_APPROVAL
            step.detail[DetailKey.APPROVAL] = ApprovalRecord(
                reasons=tuple(policy.reasons),
                preview=self.redactor.text(render_preview(spec, arguments)),
                args_hash=canonical_hash(arguments),
                approvals_required=spec.approvals_required,
                ttl_s=spec.approval_ttl_s,
                risk=spec.risk.value,
                tainted_by=tuple(policy.tainted_by),
            ).to_json()
        elif policy.decision is Decision.DENY:
            step.status = StepStatus.DENIED
            step.error = "Policy refused this call: " + "; ".join(policy.reasons)
            step.error_class = ErrorClass.DENIED
        return step


def _repeat_note(
    step: StepRecord, earlier: StepRecord, seq: int, now: dt.datetime
) -> StepRecord:
    return StepRecord(
        seq=seq,
        kind=StepKind.NOTE,
        status=StepStatus.SUCCEEDED,
        detail={
            DetailKey.TEXT: (
                f"You already called {step.tool} with these arguments (step "
                f"{earlier.seq}); this is the same result. Change your plan or "
                "answer now."
            ),
            DetailKey.ATTACH_TO: step.seq,
            DetailKey.REASON: ErrorClass.REPEATED_CALL.value,
        },
        started_at=now,
        finished_at=now,
    )
