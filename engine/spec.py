"""The engine's vocabulary: tools, calls, results, steps and stop reasons.

Plain dataclasses with no Django import; the Django side maps its models onto them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any


class Risk(StrEnum):
    READ_ONLY = "read_only"
    WRITE = "write"
    IRREVERSIBLE = "irreversible"


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
    APPROVAL_EXPIRED = "approval_expired"
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


@dataclass(frozen=True)
class ToolSpec:
    """Everything the engine needs to know about one tool, at one version."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    kind: str = "python"
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
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Usage:
        data = data or {}
        prompt = int(data.get("prompt_tokens") or 0)
        completion = int(data.get("completion_tokens") or 0)
        total = int(data.get("total_tokens") or (prompt + completion))
        return cls(prompt, completion, total)


@dataclass
class Attempt:
    """One try of a model or tool call."""

    number: int
    started_at: str
    duration_ms: float
    error: str | None = None
    error_class: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "started_at": self.started_at,
            "duration_ms": round(self.duration_ms, 3),
            "error": self.error,
            "error_class": self.error_class,
        }


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


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)
