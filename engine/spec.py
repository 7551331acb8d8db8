"""The engine's vocabulary: tools, calls, results, steps, stop reasons, error
classes, the keys of a step's detail, and the agent snapshot a run starts from.

Plain dataclasses with no Django import; the Django side maps its models onto them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from typing import Any, Generic, TypeVar, get_origin, get_type_hints, overload

T = TypeVar("T")


class Risk(StrEnum):
    READ_ONLY = "read_only"
    WRITE = "write"
    IRREVERSIBLE = "irreversible"


class ToolKind(StrEnum):
    """How a tool is implemented: a built-in handler, an HTTP endpoint or an MCP
    server's tool (the registry's ``Tool.Kind``)."""

    PYTHON = "python"
    HTTP = "http"
    MCP = "mcp"
    #: A transfer of the conversation to another agent (engine.handoff): offered
    #: from the acting agent's handoff targets, never registered as a tool.
    HANDOFF = "handoff"


class ApprovalMode(StrEnum):
    NEVER = "never"
    ALWAYS = "always"
    RULE = "rule"


class Decision(StrEnum):
    EXECUTE = "execute"
    APPROVE = "approve"
    DENY = "deny"


class StepKind(StrEnum):
    MODEL_CALL = "model_call"
    TOOL_CALL = "tool_call"
    COMPACTION = "compaction"
    NOTE = "note"
    #: A guardrail tripped on the user's input or the final answer (engine.guards).
    GUARDRAIL = "guardrail"


class StepStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    WAITING_APPROVAL = "waiting_approval"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    DENIED = "denied"
    DEDUPLICATED = "deduplicated"
    CACHED = "cached"
    SKIPPED = "skipped"


#: Statuses after which a tool step will not change again.
FINAL_STEP_STATUSES = frozenset(
    {
        StepStatus.SUCCEEDED,
        StepStatus.FAILED,
        StepStatus.REJECTED,
        StepStatus.EXPIRED,
        StepStatus.DENIED,
        StepStatus.DEDUPLICATED,
        StepStatus.CACHED,
        StepStatus.SKIPPED,
    }
)


class TaskStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING_APPROVAL = "waiting_approval"
    SUCCEEDED = "succeeded"
    STOPPED = "stopped"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINAL_TASK_STATUSES = frozenset(
    {TaskStatus.SUCCEEDED, TaskStatus.STOPPED, TaskStatus.FAILED, TaskStatus.CANCELLED}
)


class StopReason(StrEnum):
    FINAL_ANSWER = "final_answer"
    MAX_STEPS = "max_steps"
    MAX_TOOL_CALLS = "max_tool_calls"
    REPEATED_CALL = "repeated_call"
    TOOL_ERROR_LIMIT = "tool_error_limit"
    TIME_BUDGET = "time_budget"
    TOKEN_BUDGET = "token_budget"
    COST_BUDGET = "cost_budget"
    APPROVAL_EXPIRED = "approval_expired"
    #: Agents kept handing the run to each other (engine.handoff).
    HANDOFF_LOOP = "handoff_loop"
    #: A guardrail whose action is block tripped (engine.guards).
    GUARDRAIL = "guardrail"
    #: The final answer did not match the agent's answer schema, after one repair
    #: turn (engine.structured).
    BAD_ANSWER = "bad_answer"
    MODEL_ERROR = "model_error"
    INTERNAL_ERROR = "internal_error"
    CANCELLED = "cancelled"

    @property
    def task_status(self) -> TaskStatus:
        if self is StopReason.FINAL_ANSWER:
            return TaskStatus.SUCCEEDED
        if self in (StopReason.MODEL_ERROR, StopReason.INTERNAL_ERROR):
            return TaskStatus.FAILED
        if self is StopReason.CANCELLED:
            return TaskStatus.CANCELLED
        return TaskStatus.STOPPED


class ErrorClass(StrEnum):
    """Why a step failed or was skipped (``error_class``; attempts carry them too).

    Stored as plain strings, so compare with ``==`` or ``in``: a value read back
    from the database is a ``str``, equal to its member. A handler may raise a
    :class:`~engine.execution.ToolError` with a class of its own; those pass
    through unchanged.
    """

    # Planning: the call never reached its handler.
    UNKNOWN_TOOL = "unknown_tool"
    INVALID_JSON = "invalid_json"
    INVALID_ARGUMENTS = "invalid_arguments"
    DENIED = "denied"
    MAX_TOOL_CALLS = "max_tool_calls"
    REPEATED_CALL = "repeated_call"
    CIRCUIT_OPEN = "circuit_open"
    TOOL_CALL_LIMIT = "tool_call_limit"  # the tool's max_calls_per_run
    ALREADY_REJECTED = "already_rejected"  # an approver said no to this very call
    HANDOFF_LOOP = "handoff_loop"  # a handoff over the run's limit, or a loop
    # A handoff refused: the target may not be used by the run's user, is
    # unknown, is the acting agent, or a second handoff in one turn.
    HANDOFF_REFUSED = "handoff_refused"
    # Running a call.
    TIMEOUT = "timeout"
    TRANSIENT = "transient"
    EXCEPTION = "exception"
    TOOL_ERROR = "tool_error"
    BAD_RESULT = "bad_result"
    OVERLOADED = "overloaded"
    RATE_LIMITED = "rate_limited"
    NO_HANDLER = "no_handler"
    APPROVAL_MISMATCH = "approval_mismatch"
    BLOCKED = "blocked"
    # The run around a call.
    OUTCOME_UNKNOWN = "outcome_unknown"
    CANCELLED = "cancelled"
    NOT_FINISHED = "not_finished"
    NOT_RECORDED = "not_recorded"
    # The model endpoint (model_call steps; TIMEOUT and RATE_LIMITED too).
    CONNECTION = "connection"
    SERVER = "server"
    BAD_REQUEST = "bad_request"
    BAD_RESPONSE = "bad_response"
    REPLAY_EXHAUSTED = "replay_exhausted"


#: Failures found while planning: the handler never ran, and they say nothing
#: about the tool's health (the circuit breaker ignores them).
PLANNING_FAILURES = frozenset(
    {ErrorClass.UNKNOWN_TOOL, ErrorClass.INVALID_JSON, ErrorClass.INVALID_ARGUMENTS}
)


class DetailKey(StrEnum):
    """The keys of a step's ``detail`` object that code writes and reads back.

    ``detail`` is stored as a plain JSON object; these name its keys so that no
    caller spells one by hand. :class:`StepDetail` reads the control keys typed.
    """

    # Control: what later planning, execution and approval act on.
    SIGNATURE = "signature"  # tool + canonical arguments (repeated-call detection)
    APPROVAL = "approval"  # why the call waits and what the card shows
    APPROVED_HASH = "approved_hash"  # canonical hash of the approved arguments
    DECISION = "decision"  # the human decision on a parked call
    UNTRUSTED = "untrusted"  # the result came from an untrusted tool: it taints
    # The handler marked this one result untrusted (a recalled tainted memory),
    # whatever its tool's flag says: a re-run feeds it back marked the same.
    UNTRUSTED_RESULT = "untrusted_result"
    STOP = "stop"  # on a model call: the stop reason its planning flagged
    SAME_AS_SEQ = "same_as_seq"  # a deduplicated call: whose result it reuses
    # On a model call: the routing call of the turn and the route it chose
    # (engine.routing.Route); the conversation's messages leave it out.
    ROUTE = "route"
    # On a handoff's tool call: who handed the run to whom, and the snapshot of
    # the agent that acts from the next model call on (engine.handoff).
    HANDOFF = "handoff"
    # A guardrail's trip (engine.guards): on a guardrail step, and on a tool call
    # whose result a tool_result guardrail checked.
    GUARDRAIL = "guardrail"
    # Notes and compactions (what the model is told).
    TEXT = "text"
    ATTACH_TO = "attach_to"
    REASON = "reason"  # a note's cause; a rejection's reason
    REPLACED = "replaced"
    DROPPED_HISTORY_TURNS = "dropped_history_turns"
    ESTIMATE_BEFORE = "estimate_before"
    ESTIMATE_AFTER = "estimate_after"
    BUDGET = "budget"
    # Facts for the trace.
    PROMPT_ESTIMATE = "prompt_estimate"
    CONTEXT_ESTIMATE = "context_estimate"
    FINISH_REASON = "finish_reason"
    CUT = "cut"  # on a model call: the reply was cut short (a cancel mid-reply)
    WITHHELD = "withheld"  # on a model call: a question's writes (engine.questions)
    ATTEMPT_COUNT = "attempt_count"
    COPIED_FROM = "copied_from"
    FORK = "fork"


def _text(value: Any) -> str | None:
    return str(value) if value else None


def _number(value: Any) -> int | None:
    return int(value) if value is not None else None


def _object(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _stop(value: Any) -> StopReason | None:
    return StopReason(value) if value else None


class HumanDecision(StrEnum):
    """What a person decided on a parked call, as its step records it."""

    APPROVE = "approve"
    REJECT = "reject"
    # Recovery requests only: the operator checked that the call happened.
    MARK_DONE = "mark_done"
    # Recovery requests only: run the call again.
    RETRY = "retry"


#: How a decision reads once taken: on its step, in the queue's history.
DECIDED_AS: dict[HumanDecision, str] = {
    HumanDecision.APPROVE: "approved",
    HumanDecision.REJECT: "rejected",
    HumanDecision.MARK_DONE: "marked done",
    HumanDecision.RETRY: "retried",
}


@dataclass(frozen=True)
class DecisionRecord:
    """The human decision on a parked call (a step's ``detail["decision"]``).

    :meth:`from_json` reads what any version wrote; keys it does not know stay
    in ``extra`` and :meth:`to_json` writes them back as they were.
    """

    #: None for a decision this version does not know.
    decision: HumanDecision | None = None
    by: str | None = None
    at: str | None = None
    reason: str | None = None
    #: The call runs with arguments the approver changed.
    edited: bool = False
    #: The approval request decided (its id).
    approval: str | None = None
    #: Decided on a recovery request (an interrupted call), not on the action.
    recovery: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> DecisionRecord | None:
        if not isinstance(data, Mapping) or not data:
            return None
        return cls(
            decision=_human_decision(data.get("decision")),
            by=_text(data.get("by")),
            at=_text(data.get("at")),
            reason=_text(data.get("reason")),
            edited=bool(data.get("edited")),
            approval=_text(data.get("approval")),
            recovery=bool(data.get("recovery")),
            extra={k: v for k, v in data.items() if k not in _DECISION_KEYS},
        )

    def to_json(self) -> dict[str, Any]:
        return {
            **dict(self.extra),
            "decision": self.decision.value if self.decision else None,
            "by": self.by,
            "at": self.at,
            "reason": self.reason,
            "edited": self.edited,
            "approval": self.approval,
            "recovery": self.recovery,
        }


@dataclass(frozen=True)
class ApprovalRecord:
    """Why a call waits for people and what its card shows (a step's
    ``detail["approval"]``, written by planning when the policy asks a human)."""

    reasons: tuple[str, ...] = ()
    #: The card's one-line summary of the call (redacted).
    preview: str | None = None
    #: The canonical hash of the arguments as proposed.
    args_hash: str | None = None
    approvals_required: int | None = None
    ttl_s: int | None = None
    risk: str | None = None
    tainted_by: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> ApprovalRecord | None:
        if not isinstance(data, Mapping):
            return None
        return cls(
            reasons=tuple(str(r) for r in data.get("reasons") or ()),
            preview=_text(data.get("preview")),
            args_hash=_text(data.get("args_hash")),
            approvals_required=_number(data.get("approvals_required")),
            ttl_s=_number(data.get("ttl_s")),
            risk=_text(data.get("risk")),
            tainted_by=tuple(str(t) for t in data.get("tainted_by") or ()),
            extra={k: v for k, v in data.items() if k not in _APPROVAL_KEYS},
        )

    def to_json(self) -> dict[str, Any]:
        return {
            **dict(self.extra),
            "reasons": list(self.reasons),
            "preview": self.preview,
            "args_hash": self.args_hash,
            "approvals_required": self.approvals_required,
            "ttl_s": self.ttl_s,
            "risk": self.risk,
            "tainted_by": list(self.tainted_by),
        }


#: The keys each record reads; any other key of the stored object is ``extra``.
_DECISION_KEYS = frozenset(f.name for f in fields(DecisionRecord)) - {"extra"}
_APPROVAL_KEYS = frozenset(f.name for f in fields(ApprovalRecord)) - {"extra"}


def _human_decision(value: Any) -> HumanDecision | None:
    try:
        return HumanDecision(value)
    except ValueError:
        return None


class _Key(Generic[T]):
    """One typed read of a :class:`StepDetail` key: ``detail.<name>``."""

    def __init__(self, key: DetailKey, read: Callable[[Any], T]) -> None:
        self.key = key
        self.read = read

    @overload
    def __get__(self, detail: None, owner: type[Any]) -> _Key[T]: ...

    @overload
    def __get__(self, detail: StepDetail, owner: type[Any]) -> T: ...

    def __get__(self, detail: StepDetail | None, owner: type[Any]) -> _Key[T] | T:
        if detail is None:
            return self
        return self.read((detail.data or {}).get(self.key))


@dataclass(frozen=True)
class StepDetail:
    """Typed reads of a step's ``detail`` object (it stays a plain dict).

    ``StepDetail(step.detail).signature`` works on an engine record and on a
    database row alike; writes name their key with :class:`DetailKey`. A key
    absent (or empty) reads as None, ``{}`` or False.
    """

    data: Mapping[str, Any] | None

    signature = _Key(DetailKey.SIGNATURE, _text)
    #: What the policy recorded for the approval card (None: the call never
    #: waited for approval).
    approval = _Key(DetailKey.APPROVAL, ApprovalRecord.from_json)
    approved_hash = _Key(DetailKey.APPROVED_HASH, _text)
    #: The human decision on the call (None: nobody decided).
    decision = _Key(DetailKey.DECISION, DecisionRecord.from_json)
    untrusted = _Key(DetailKey.UNTRUSTED, bool)
    stop = _Key(DetailKey.STOP, _stop)
    same_as_seq = _Key(DetailKey.SAME_AS_SEQ, _number)
    reason = _Key(DetailKey.REASON, _text)
    #: A compaction's shortened results, by seq (as a string).
    replaced = _Key(DetailKey.REPLACED, _object)
    attach_to = _Key(DetailKey.ATTACH_TO, _number)
    finish_reason = _Key(DetailKey.FINISH_REASON, _text)
    #: A forked step's origin: ``{"task": id, "seq": n}``.
    copied_from = _Key(DetailKey.COPIED_FROM, _object)
    #: The call a fork re-ran with the arguments its forker gave
    #: (``{"edited": true, "parent": id, "original_arguments": ...}``).
    fork = _Key(DetailKey.FORK, _object)
    #: A handoff's record (``{"from", "to", "snapshot"}``; engine.handoff).
    handoff = _Key(DetailKey.HANDOFF, _object)

    @property
    def waited_for_approval(self) -> bool:
        return DetailKey.APPROVAL in (self.data or {})

    @property
    def rejection_reason(self) -> str | None:
        """Why the call was rejected: the step's reason, else its decision's."""
        decision = self.decision
        return self.reason or (decision.reason if decision else None)


@dataclass(frozen=True)
class ToolSpec:
    """Everything the engine needs to know about one tool, at one version."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    #: A :class:`ToolKind` value; read back as recorded (``str``), since an
    #: imported trace's definitions are kept as the trace carries them.
    kind: str = ToolKind.PYTHON
    risk: Risk = Risk.READ_ONLY
    approval: ApprovalMode = ApprovalMode.NEVER
    approval_rule: str | None = None
    approvals_required: int = 1
    approval_ttl_s: int = 3600
    untrusted_output: bool = False
    idempotent: bool = False
    timeout_s: float = 10.0
    max_retries: int = 0
    max_result_chars: int = 4000
    result_fields: tuple[str, ...] = ()
    cache_ttl_s: int = 0
    rate_limit_per_min: int = 0
    #: Calls of this tool one run may make (0: no limit); a call over it is
    #: refused at planning, before it runs.
    max_calls_per_run: int = 0
    preview_template: str = ""
    tags: tuple[str, ...] = ()
    version: int = 1
    #: True for HTTP/MCP tools whose calls leave for a host outside the house.
    leaves_house: bool = False

    @property
    def retry_safe(self) -> bool:
        """Retry only reads and writes that honour idempotency keys."""
        return self.risk is Risk.READ_ONLY or self.idempotent

    @property
    def cacheable(self) -> bool:
        return self.risk is Risk.READ_ONLY and self.cache_ttl_s > 0

    def openai_tool(self) -> dict[str, Any]:
        """The definition offered to the model (chat-completions ``tools`` item)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }

    @classmethod
    def from_definition(cls, definition: Mapping[str, Any]) -> ToolSpec:
        """The spec of a tool definition as recorded (docs/api.md "Tool definitions").

        Every field is read by its type (:data:`_TOOL_READERS`); an absent key
        takes the field's default (no description; parameters: any object), and
        so does an empty value of the fields in :data:`_TOOL_EMPTY_IS_DEFAULT`.
        A value that its type cannot read raises.
        """
        values: dict[str, Any] = {
            "name": definition["name"],
            # The two fields with no default of their own.
            "description": "",
            "parameters": {"type": "object"},
        }
        for name, read in _TOOL_READERS.items():
            if name in definition:
                value = definition[name]
                if value or name not in _TOOL_EMPTY_IS_DEFAULT:
                    values[name] = read(value)
        return cls(**values)

    @staticmethod
    def json_types() -> dict[str, tuple[type, ...]]:
        """What each field of a definition may be in JSON (for validating input)."""
        return dict(_TOOL_JSON_TYPES)


def _tool_field_rules() -> tuple[
    dict[str, Callable[[Any], Any]], dict[str, tuple[type, ...]]
]:
    """The reader and the JSON types of each ToolSpec field, from its annotation."""
    readers: dict[str, Callable[[Any], Any]] = {}
    types: dict[str, tuple[type, ...]] = {}
    hints = get_type_hints(ToolSpec)
    for spec_field in fields(ToolSpec):
        hint = hints[spec_field.name]
        read: Callable[[Any], Any]
        json: tuple[type, ...]
        if isinstance(hint, type) and issubclass(hint, StrEnum):
            read, json = hint, (str,)
        elif hint is bool:
            read, json = bool, (bool,)
        elif hint is int:
            read, json = int, (int,)
        elif hint is float:
            read, json = float, (int, float)
        elif hint is str:
            read, json = _same, (str,)
        elif hint == str | None:
            read, json = _same, (str, type(None))
        elif get_origin(hint) is tuple:
            read, json = tuple, (list,)
        elif get_origin(hint) is Mapping:
            read, json = _same, (dict,)
        else:  # pragma: no cover - a new kind of field must say how it is read
            raise TypeError(f"ToolSpec.{spec_field.name}: no reader for {hint!r}")
        if spec_field.name != "name":
            readers[spec_field.name] = read
        types[spec_field.name] = json
    return readers, types


def _same(value: Any) -> Any:
    return value


_TOOL_READERS, _TOOL_JSON_TYPES = _tool_field_rules()
#: Fields whose empty value (null, "", [], {}) in a definition means the default.
_TOOL_EMPTY_IS_DEFAULT = frozenset(
    {"parameters", "result_fields", "max_calls_per_run", "preview_template", "tags"}
)


@dataclass(frozen=True)
class CallContext:
    """What a handler may know about the call it serves."""

    task_id: str
    seq: int
    idempotency_key: str
    tool: ToolSpec
    deadline: float  # time.monotonic() value after which the result is discarded


Handler = Callable[[dict[str, Any], CallContext], Any]


@dataclass(frozen=True)
class Toolbox:
    """The tools offered to one run: specs by name and their handlers."""

    specs: Mapping[str, ToolSpec]
    handlers: Mapping[str, Handler]

    def names(self) -> list[str]:
        return sorted(self.specs)


@dataclass
class Usage:
    """Tokens of a model call (or a run's sum). ``cached_tokens`` are the prompt
    tokens the endpoint served from its prompt cache (a part of
    ``prompt_tokens``, priced lower); ``estimated`` marks counts the engine
    estimated because the endpoint reported none."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0
    estimated: bool = False

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            self.cached_tokens + other.cached_tokens,
            self.estimated or other.estimated,
        )

    def as_dict(self) -> dict[str, int]:
        """The recorded shape (docs/api.md "Task"): the three counts, then
        ``cached_tokens`` and ``estimated`` only where they say something."""
        data = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.cached_tokens:
            data["cached_tokens"] = self.cached_tokens
        if self.estimated:
            data["estimated"] = True
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Usage:
        """Usage as recorded, or as the chat-completions API returns it (cached
        tokens under ``prompt_tokens_details``)."""
        data = data or {}
        prompt = _count(data.get("prompt_tokens"))
        completion = _count(data.get("completion_tokens"))
        total = _count(data.get("total_tokens")) or (prompt + completion)
        details = data.get("prompt_tokens_details")
        cached = _count(data.get("cached_tokens")) or (
            _count(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
        )
        estimated = data.get("estimated") is True
        return cls(prompt, completion, total, min(cached, prompt), estimated)


def _count(value: Any) -> int:
    """A token count read from JSON: a non-negative integer, else 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, int(value))


@dataclass
class Attempt:
    """One try of a model or tool call."""

    number: int
    started_at: str
    duration_ms: float
    error: str | None = None
    error_class: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "duration_ms": round(self.duration_ms, 3)}


@dataclass
class ToolCall:
    """One tool call as the model proposed it."""

    call_id: str
    name: str
    raw_arguments: str
    index: int


@dataclass
class ToolResult:
    """The outcome of executing one call (after retries)."""

    ok: bool
    value: Any = None
    error: str | None = None
    error_class: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    cached: bool = False
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    #: The handler returned its value as :class:`~engine.execution.Untrusted`.
    untrusted: bool = False


@dataclass
class StepRecord:
    """The engine's view of one persisted step."""

    seq: int
    kind: StepKind
    status: StepStatus
    tool: str | None = None
    tool_version: int | None = None
    call_id: str | None = None
    call_index: int | None = None
    parent_seq: int | None = None
    arguments: Any = None
    raw_arguments: str | None = None
    proposed_arguments: Any = None
    result: Any = None
    error: str | None = None
    error_class: str | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None
    request_id: str | None = None
    response: dict[str, Any] | None = None
    usage: dict[str, int] | None = None
    idempotency_key: str | None = None
    tainted_by: list[str] = field(default_factory=list)
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    #: A model call's cost in USD at the run's price; None when the model has
    #: no price (cost unknown), and on every other kind of step.
    cost_usd: float | None = None
    #: The agent acting when the step was made, on runs whose agent may hand
    #: off (engine.handoff); None on every other run (its task's agent acted).
    agent: str | None = None
    rev: int = 0

    def copy(self, **changes: Any) -> StepRecord:
        return replace(self, **changes)

    @property
    def duration_ms(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds() * 1000


@dataclass(frozen=True)
class Limits:
    """Stop conditions of one Agent profile."""

    max_steps: int = 12
    max_tool_calls: int = 30
    tool_error_limit: int = 8
    consecutive_failure_limit: int = 3
    time_budget_s: float = 600.0
    token_budget: int = 200_000
    context_budget_tokens: int = 3500
    parallel_tool_calls: int = 4
    stop_on_approval_expired: bool = False
    #: USD one run may spend on model calls (None: no limit); needs a price.
    max_cost_usd: float | None = None
    #: Handoffs between agents one run may make (engine.handoff).
    max_handoffs: int = 5
    #: A question that asks for no action gets no write tool (engine.questions).
    questions_read_only: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Limits:
        """Limits as recorded by any version: a key this version does not know is
        ignored, a missing one (or one of the wrong type) takes its default."""
        defaults = cls()
        known: dict[str, Any] = {}
        for item in fields(cls):
            if item.name not in data:
                continue
            value, default = data[item.name], getattr(defaults, item.name)
            if isinstance(default, bool):
                if isinstance(value, bool):
                    known[item.name] = value
            elif isinstance(value, bool) or not isinstance(value, int | float):
                continue
            elif isinstance(default, int):
                if isinstance(value, int) or value.is_integer():
                    known[item.name] = int(value)
            else:
                known[item.name] = float(value)
        return cls(**known)


DEFAULT_INSTRUCTIONS = "You are a helpful assistant."

_SNAPSHOT_KEYS = frozenset(
    {"name", "model", "instructions", "limits", "tools", "history", "handoffs"}
)


@dataclass(frozen=True)
class AgentSnapshot:
    """The agent as one run uses it, recorded on its task when the run starts.

    Stored as ``Task.agent_snapshot``, a plain JSON object: ``name``, ``model``,
    ``instructions``, ``limits``, ``tools`` (the tool definitions as they were,
    docs/api.md), ``handoffs`` (the agents it may hand the run to) and, for
    forks and imports, ``history`` (the conversation's earlier turns, carried
    because the run lives in a conversation of its own).
    :meth:`from_json` reads what any version stored; keys it does not know are
    kept in ``extra`` and written back by :meth:`to_json` as they were.
    """

    name: str = ""
    model: str = ""
    instructions: str = ""
    #: None when the snapshot recorded no limits (use the agent's current ones).
    limits: Limits | None = None
    tools: tuple[dict[str, Any], ...] = ()
    #: None when no turns were carried (read them from the conversation).
    history: tuple[dict[str, str], ...] | None = None
    #: The agents it may hand the conversation to, each ``{"agent", "description"}``
    #: (engine.handoff); recorded only when there are some.
    handoffs: tuple[dict[str, str], ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Any) -> AgentSnapshot:
        if isinstance(data, AgentSnapshot):
            return data
        if not isinstance(data, Mapping):
            return cls()
        limits = data.get("limits")
        history = data.get("history")
        return cls(
            name=str(data.get("name") or ""),
            model=str(data.get("model") or ""),
            instructions=str(data.get("instructions") or ""),
            limits=Limits.from_json(limits) if isinstance(limits, Mapping) else None,
            tools=tuple(
                dict(d)
                for d in data.get("tools") or ()
                if isinstance(d, Mapping) and isinstance(d.get("name"), str)
            ),
            history=(
                tuple(
                    {"role": str(m.get("role")), "content": str(m.get("content"))}
                    for m in history
                    if isinstance(m, Mapping)
                )
                if isinstance(history, list | tuple)
                else None
            ),
            handoffs=tuple(
                {
                    "agent": str(target["agent"]),
                    "description": str(target.get("description") or ""),
                }
                for target in data.get("handoffs") or ()
                if isinstance(target, Mapping) and target.get("agent")
            ),
            extra={k: v for k, v in data.items() if k not in _SNAPSHOT_KEYS},
        )

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "model": self.model,
            "instructions": self.instructions,
        }
        if self.limits is not None:
            data["limits"] = self.limits.to_json()
        data["tools"] = [dict(d) for d in self.tools]
        if self.history is not None:
            data["history"] = [dict(m) for m in self.history]
        if self.handoffs:
            data["handoffs"] = [dict(t) for t in self.handoffs]
        return {**dict(self.extra), **data}

    def replace(self, **changes: Any) -> AgentSnapshot:
        return replace(self, **changes)

    @property
    def system_prompt(self) -> str:
        return self.instructions or DEFAULT_INSTRUCTIONS

    def tool(self, name: str) -> dict[str, Any] | None:
        """The recorded definition of the tool named ``name``, if the run had it
        (the one lookup of a tool in a snapshot; a later duplicate wins)."""
        for definition in reversed(self.tools):
            if definition.get("name") == name:
                return dict(definition)
        return None

    def spec(self, name: str) -> ToolSpec | None:
        definition = self.tool(name)
        return ToolSpec.from_definition(definition) if definition else None

    def specs(self) -> dict[str, ToolSpec]:
        """Every recorded tool's spec, by name (a later duplicate wins)."""
        return {d["name"]: ToolSpec.from_definition(d) for d in self.tools}


def taint_label(tool: str | None, seq: int, task_id: str = "") -> str:
    """What names one untrusted result as a taint source: the tool, the step and
    the task it belongs to (``search_notes#2@1a2b3c4d``), so that the same step
    number of two tasks of one conversation are two sources, not one."""
    label = f"{tool}#{seq}"
    return f"{label}@{task_id[:8]}" if task_id else label


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
