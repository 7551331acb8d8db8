"""Finished runs as OpenTelemetry traces, in the GenAI semantic conventions.

Follows **OpenTelemetry semantic conventions v1.41.0** (schema
``https://opentelemetry.io/schemas/1.41.0``), the GenAI conventions as that release
defines them: the last release before they moved to their own repository, all marked
Development. The names used are the :class:`Attr` members below; anything of ours
is namespaced ``agent_reach.*``.

One task is one trace; its id *is* the task's UUID (``trace_id`` = the UUID's 128
bits), so a collector finds a run by its task id written without dashes::

    invoke_agent {agent}        INTERNAL  task created → finished
    ├── chat {model}            CLIENT    one per model_call step
    ├── await_approval {tool}   INTERNAL  one per approval request: asked → decided
    └── execute_tool {tool}     INTERNAL  one per tool_call step

Why the trace is built from the stored rows once the task is final, and not span by
span while it runs: a run is advanced by many Celery tasks, possibly on several
workers, with a human's wait between them; the ``Step`` rows already hold every
start and end time, so one pass over them gives a single trace with the real times
whatever happened in between, and the same pass exports past runs
(``manage.py export_otel``). Span ids are derived from the task id and step seq (or
approval id), so a run exported twice is the same trace, not a copy.

Exporting never slows or fails a run: the finished task's id is handed, after
commit, to one background thread that reads the rows and feeds the SDK's
``BatchSpanProcessor``, which sends from its own thread; an unreachable collector is
a logged warning. Content (the goal, replies, tool arguments and results) is only
recorded with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, and then
passed through the redactor first.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection, transaction
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from approvals.models import ApprovalRequest
from approvals.selectors import task_approvals
from engine.spec import AgentSnapshot, DetailKey, StepKind, StepStatus, TaskStatus
from infra.runtime import redactor
from registry.models import Tool
from runs.models import Step, Task

log = logging.getLogger(__name__)

SEMCONV_VERSION = "1.41.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
SCOPE = "agent_reach"
#: ``service.name`` unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names one.
DEFAULT_SERVICE_NAME = "agent-reach"
#: What the model endpoint speaks (the ``openai`` SDK against any compatible server).
PROVIDER_NAME = "openai"


class Attr(StrEnum):
    """Every attribute a span carries."""

    OPERATION_NAME = "gen_ai.operation.name"
    PROVIDER_NAME = "gen_ai.provider.name"
    AGENT_ID = "gen_ai.agent.id"
    AGENT_NAME = "gen_ai.agent.name"
    CONVERSATION_ID = "gen_ai.conversation.id"
    REQUEST_MODEL = "gen_ai.request.model"
    RESPONSE_MODEL = "gen_ai.response.model"
    RESPONSE_ID = "gen_ai.response.id"
    RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
    USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
    USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
    TOOL_NAME = "gen_ai.tool.name"
    TOOL_CALL_ID = "gen_ai.tool.call.id"
    TOOL_TYPE = "gen_ai.tool.type"
    TOOL_DESCRIPTION = "gen_ai.tool.description"
    ERROR_TYPE = "error.type"
    # Opt-in content (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT).
    INPUT_MESSAGES = "gen_ai.input.messages"
    OUTPUT_MESSAGES = "gen_ai.output.messages"
    SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
    TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
    TOOL_CALL_RESULT = "gen_ai.tool.call.result"
    # Ours.
    TASK_ID = "agent_reach.task.id"
    TASK_STATUS = "agent_reach.task.status"
    STOP_REASON = "agent_reach.task.stop_reason"
    STEP_SEQ = "agent_reach.step.seq"
    STEP_STATUS = "agent_reach.step.status"
    TOOL_RISK = "agent_reach.tool.risk"
    TOOL_VERSION = "agent_reach.tool.version"
    APPROVAL_ID = "agent_reach.approval.id"
    APPROVAL_KIND = "agent_reach.approval.kind"
    APPROVAL_DECISION = "agent_reach.approval.decision"
    APPROVAL_DECIDED_BY = "agent_reach.approval.decided_by"
    APPROVAL_WAIT_S = "agent_reach.approval.wait_s"


class Operation(StrEnum):
    INVOKE_AGENT = "invoke_agent"
    CHAT = "chat"
    EXECUTE_TOOL = "execute_tool"
    AWAIT_APPROVAL = "await_approval"


class ToolType(StrEnum):
    """``gen_ai.tool.type``: in-process handlers, or calls of an outside API."""

    FUNCTION = "function"
    EXTENSION = "extension"


#: Tool steps that ended without the call having done its work.
_TOOL_FAILURES = frozenset(
    {
        StepStatus.FAILED,
        StepStatus.DENIED,
        StepStatus.REJECTED,
        StepStatus.EXPIRED,
    }
)
#: Tasks that did not reach their goal; cancelling is the user's choice, no error.
_TASK_FAILURES = frozenset({TaskStatus.FAILED, TaskStatus.STOPPED})


# -- the trace of one task, as plain data ----------------------------------------


@dataclass(frozen=True)
class PlannedSpan:
    """One span of a task's trace, before the SDK sees it."""

    name: str
    kind: SpanKind
    span_id: int
    parent_id: int | None
    start: dt.datetime
    end: dt.datetime
    attributes: dict[str, AttributeValue]
    error_type: str | None = None


@dataclass(frozen=True)
class PlannedTrace:
    trace_id: int
    spans: tuple[PlannedSpan, ...]

    @property
    def root(self) -> PlannedSpan:
        return self.spans[0]


def span_id_for(task: Task, part: str) -> int:
    """A span id fixed by the task and what the span stands for (never 0)."""
    digest = hashlib.sha256(f"{task.pk}:{part}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def plan_trace(task: Task, *, content: bool | None = None) -> PlannedTrace | None:
    """The trace of a final task from its rows; None when it has nothing to show.

    ``content`` (default: the setting) adds the redacted messages, tool arguments
    and results.
    """
    if not task.is_final or task.finished_at is None:
        return None
    with_content = settings.REACH_OTEL_CAPTURE_CONTENT if content is None else content
    steps = list(task.steps.order_by("seq"))
    approvals = list(task_approvals(task))
    snapshot = AgentSnapshot.from_json(task.agent_snapshot)
    root = _agent_span(task, snapshot, steps, with_content)
    children: list[PlannedSpan] = []
    for step in steps:
        if step.kind == StepKind.MODEL_CALL:
            span = _chat_span(task, step, root, with_content)
        elif step.kind == StepKind.TOOL_CALL:
            span = _tool_span(task, step, root, snapshot, with_content)
        else:
            # Notes and compactions are the engine's bookkeeping, not operations.
            span = None
        if span is not None:
            children.append(span)
    for approval in approvals:
        children.append(_approval_span(task, approval, root))
    children.sort(key=lambda s: (s.start, s.end))
    return PlannedTrace(trace_id=task.pk.int, spans=(root, *children))


def _agent_span(
    task: Task, snapshot: AgentSnapshot, steps: Sequence[Step], content: bool
) -> PlannedSpan:
    agent = snapshot.name or task.agent.name
    attributes: dict[str, AttributeValue] = {
        Attr.OPERATION_NAME: Operation.INVOKE_AGENT.value,
        Attr.PROVIDER_NAME: PROVIDER_NAME,
        Attr.AGENT_ID: str(task.agent_id),
        Attr.AGENT_NAME: agent,
        Attr.CONVERSATION_ID: str(task.conversation_id),
        Attr.REQUEST_MODEL: task.model,
        Attr.USAGE_INPUT_TOKENS: task.prompt_tokens,
        Attr.USAGE_OUTPUT_TOKENS: task.completion_tokens,
        Attr.TASK_ID: str(task.pk),
        Attr.TASK_STATUS: task.status,
    }
    if task.stop_reason:
        attributes[Attr.STOP_REASON] = task.stop_reason
    error = task.stop_reason if task.status in _TASK_FAILURES else None
    if content:
        attributes[Attr.INPUT_MESSAGES] = _json(
            [{"role": "user", "parts": [{"type": "text", "content": task.goal}]}]
        )
        if task.final_answer is not None:
            attributes[Attr.OUTPUT_MESSAGES] = _json(
                [
                    {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": task.final_answer}],
                        "finish_reason": "stop",
                    }
                ]
            )
        instructions = snapshot.instructions
        if instructions:
            attributes[Attr.SYSTEM_INSTRUCTIONS] = _json(
                [{"type": "text", "content": instructions}]
            )
    assert task.finished_at is not None
    # The whole run as its user lived it: queued time and human waits included.
    start = min([task.created_at, *(s.started_at for s in steps if s.started_at)])
    return PlannedSpan(
        name=f"{Operation.INVOKE_AGENT} {agent}",
        kind=SpanKind.INTERNAL,
        span_id=span_id_for(task, "task"),
        parent_id=None,
        start=start,
        end=max(task.finished_at, start),
        attributes=attributes,
        error_type=error,
    )


def _times(step: Step) -> tuple[dt.datetime, dt.datetime] | None:
    """A step's span: from its start (or its end, for a call that never started)."""
    start = step.started_at or step.finished_at
    if start is None:
        return None
    end = step.finished_at or start
    return start, max(start, end)


def _step_span(
    task: Task,
    step: Step,
    root: PlannedSpan,
    name: str,
    kind: SpanKind,
    times: tuple[dt.datetime, dt.datetime],
    attributes: dict[str, AttributeValue],
    error: str | None,
) -> PlannedSpan:
    """A step's span: a child of the run's, its id derived from the step."""
    return PlannedSpan(
        name=name,
        kind=kind,
        span_id=span_id_for(task, f"step:{step.seq}"),
        parent_id=root.span_id,
        start=times[0],
        end=times[1],
        attributes=attributes,
        error_type=error,
    )


def _chat_span(
    task: Task, step: Step, root: PlannedSpan, content: bool
) -> PlannedSpan | None:
    times = _times(step)
    if times is None:
        return None
    usage = step.usage or {}
    attributes: dict[str, AttributeValue] = {
        Attr.OPERATION_NAME: Operation.CHAT.value,
        Attr.PROVIDER_NAME: PROVIDER_NAME,
        Attr.CONVERSATION_ID: str(task.conversation_id),
        Attr.REQUEST_MODEL: task.model,
        Attr.STEP_SEQ: step.seq,
        Attr.STEP_STATUS: step.status,
    }
    if step.model:
        attributes[Attr.RESPONSE_MODEL] = step.model
    if step.request_id:
        # The id the server gave its answer (the request id it sent back).
        attributes[Attr.RESPONSE_ID] = step.request_id
    for key, name in (
        ("prompt_tokens", Attr.USAGE_INPUT_TOKENS),
        ("completion_tokens", Attr.USAGE_OUTPUT_TOKENS),
    ):
        if isinstance(usage.get(key), int):
            attributes[name] = usage[key]
    finish_reason = (step.detail or {}).get(DetailKey.FINISH_REASON)
    if finish_reason:
        attributes[Attr.RESPONSE_FINISH_REASONS] = [str(finish_reason)]
    if content and step.response:
        attributes[Attr.OUTPUT_MESSAGES] = _json(
            [_output_message(step.response, finish_reason)]
        )
    error = None
    if step.status == StepStatus.FAILED:
        error = step.error_class or StepStatus.FAILED.value
    return _step_span(
        task,
        step,
        root,
        f"{Operation.CHAT} {task.model}",
        SpanKind.CLIENT,
        times,
        attributes,
        error,
    )


def _output_message(message: Mapping[str, Any], finish: Any) -> dict[str, Any]:
    """An assistant message in the conventions' shape: role, parts, finish reason."""
    parts: list[dict[str, Any]] = []
    if message.get("content"):
        parts.append({"type": "text", "content": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments: Any = function.get("arguments")
        with contextlib.suppress(TypeError, ValueError):
            arguments = json.loads(arguments)
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": arguments,
            }
        )
    return {"role": "assistant", "parts": parts, "finish_reason": finish or "stop"}


def _tool_span(
    task: Task,
    step: Step,
    root: PlannedSpan,
    snapshot: AgentSnapshot,
    content: bool,
) -> PlannedSpan | None:
    times = _times(step)
    if times is None:
        return None
    tool = step.tool or ""
    definition = snapshot.tool(tool) or {}
    attributes: dict[str, AttributeValue] = {
        Attr.OPERATION_NAME: Operation.EXECUTE_TOOL.value,
        Attr.TOOL_NAME: tool,
        Attr.TOOL_TYPE: (
            ToolType.FUNCTION
            if definition.get("kind", Tool.Kind.PYTHON) == Tool.Kind.PYTHON
            else ToolType.EXTENSION
        ).value,
        Attr.STEP_SEQ: step.seq,
        Attr.STEP_STATUS: step.status,
    }
    if step.call_id:
        attributes[Attr.TOOL_CALL_ID] = step.call_id
    if definition.get("description"):
        attributes[Attr.TOOL_DESCRIPTION] = str(definition["description"])
    if definition.get("risk"):
        attributes[Attr.TOOL_RISK] = str(definition["risk"])
    if step.tool_version is not None:
        attributes[Attr.TOOL_VERSION] = step.tool_version
    if content:
        arguments = step.arguments if step.arguments is not None else step.raw_arguments
        attributes[Attr.TOOL_CALL_ARGUMENTS] = _json(arguments)
        if step.result is not None:
            attributes[Attr.TOOL_CALL_RESULT] = _json(step.result)
        elif step.error:
            attributes[Attr.TOOL_CALL_RESULT] = _json({"error": step.error})
    error = None
    if step.status == StepStatus.FAILED:
        error = step.error_class or StepStatus.FAILED.value
    elif step.status in _TOOL_FAILURES:
        # Refused by policy or a human, or never decided: the refusal is the class.
        error = step.status
    return _step_span(
        task,
        step,
        root,
        f"{Operation.EXECUTE_TOOL} {tool}",
        SpanKind.INTERNAL,
        times,
        attributes,
        error,
    )


def _approval_span(
    task: Task, approval: ApprovalRequest, root: PlannedSpan
) -> PlannedSpan:
    start = approval.requested_at
    end = max(approval.decided_at or root.end, start)
    decision = approval.decision or approval.status
    attributes: dict[str, AttributeValue] = {
        Attr.OPERATION_NAME: Operation.AWAIT_APPROVAL.value,
        Attr.TOOL_NAME: approval.tool,
        Attr.APPROVAL_ID: str(approval.pk),
        Attr.APPROVAL_KIND: approval.kind,
        Attr.APPROVAL_DECISION: decision,
        Attr.APPROVAL_DECIDED_BY: (
            approval.decided_by.get_username() if approval.decided_by else ""
        ),
        Attr.APPROVAL_WAIT_S: round((end - start).total_seconds(), 6),
        Attr.STEP_SEQ: approval.step.seq,
    }
    if approval.step.call_id:
        attributes[Attr.TOOL_CALL_ID] = approval.step.call_id
    return PlannedSpan(
        name=f"{Operation.AWAIT_APPROVAL} {approval.tool}",
        kind=SpanKind.INTERNAL,
        span_id=span_id_for(task, f"approval:{approval.pk}"),
        parent_id=root.span_id,
        start=start,
        end=end,
        attributes=attributes,
    )


def _json(value: Any) -> str:
    """Structured content as the conventions' JSON string, redacted first."""
    return json.dumps(redactor().data(value), ensure_ascii=False, default=str)


# -- the SDK pipeline ----------------------------------------------------------------


class _PlannedIds(IdGenerator):
    """Hands the SDK the ids a :class:`PlannedTrace` fixed for the next span.

    The SDK asks its generator for the ids of every span it starts; outside
    :meth:`use` (no span of ours) it answers with random ones.
    """

    def __init__(self) -> None:
        self._next: contextvars.ContextVar[tuple[int, int] | None] = (
            contextvars.ContextVar("planned_ids", default=None)
        )
        self._random = RandomIdGenerator()

    @contextlib.contextmanager
    def use(self, trace_id: int, span_id: int) -> Iterator[None]:
        token = self._next.set((trace_id, span_id))
        try:
            yield
        finally:
            self._next.reset(token)

    def generate_trace_id(self) -> int:
        planned = self._next.get()
        return planned[0] if planned else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        planned = self._next.get()
        return planned[1] if planned else self._random.generate_span_id()


@dataclass
class ExportCounts:
    """What the exporter reported since the pipeline was built."""

    exported: int = 0
    failed: int = 0


class _CountingExporter(SpanExporter):
    """The OTLP exporter, counting what it sent and what it could not send."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.counts = ExportCounts()
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:  # noqa: BLE001 - a collector never breaks the caller
            log.warning("OpenTelemetry export failed", exc_info=True)
            result = SpanExportResult.FAILURE
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.counts.exported += len(spans)
            else:
                self.counts.failed += len(spans)
        if result is not SpanExportResult.SUCCESS:
            log.warning(
                "OpenTelemetry: %d spans not delivered to the collector", len(spans)
            )
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


@dataclass
class _Pipeline:
    key: tuple[tuple[str, str], ...]
    provider: TracerProvider
    tracer: trace_api.Tracer
    ids: _PlannedIds
    exporter: _CountingExporter
    background: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="otel")
    )

    def close(self, timeout_s: float = 30.0) -> None:
        self.background.shutdown(wait=True)
        self.provider.force_flush(int(timeout_s * 1000))
        self.provider.shutdown()


_lock = threading.Lock()
_current: _Pipeline | None = None


def _environment() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("OTEL_")))


def _pipeline() -> _Pipeline:
    """The process's pipeline, rebuilt when the OTEL_* environment changed.

    Built lazily, so a forked worker builds its own (with its own threads).
    """
    global _current
    key = _environment()
    with _lock:
        if _current is not None and _current.key == key:
            return _current
        stale, _current = _current, _build(key)
        current = _current
    if stale is not None:
        threading.Thread(target=stale.close, name="otel-close", daemon=True).start()
    return current


def _build(key: tuple[tuple[str, str], ...]) -> _Pipeline:
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    ids = _PlannedIds()
    # The SDK reads the sampler, span limits, endpoint, headers, timeout,
    # compression and batching from the OTEL_* variables itself.
    provider = TracerProvider(resource=resource, id_generator=ids)
    exporter = _CountingExporter(OTLPSpanExporter())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer(SCOPE, schema_url=SCHEMA_URL)
    return _Pipeline(
        key=key, provider=provider, tracer=tracer, ids=ids, exporter=exporter
    )


def emit(trace: PlannedTrace) -> int:
    """Hand ``trace`` to the batch processor; return how many spans it took."""
    pipeline = _pipeline()
    root_plan = trace.root
    with pipeline.ids.use(trace.trace_id, root_plan.span_id):
        root = pipeline.tracer.start_span(
            root_plan.name,
            kind=root_plan.kind,
            attributes=root_plan.attributes,
            start_time=_ns(root_plan.start),
        )
    # Children hang off the real root: a sampled-out root drops its whole trace.
    sampled = root.is_recording()
    parent = trace_api.set_span_in_context(root)
    for plan in trace.spans[1:]:
        with pipeline.ids.use(trace.trace_id, plan.span_id):
            span = pipeline.tracer.start_span(
                plan.name,
                context=parent,
                kind=plan.kind,
                attributes=plan.attributes,
                start_time=_ns(plan.start),
            )
        _end(span, plan)
    _end(root, root_plan)
    return len(trace.spans) if sampled else 0


def _end(span: trace_api.Span, plan: PlannedSpan) -> None:
    if plan.error_type:
        span.set_attribute(Attr.ERROR_TYPE, plan.error_type)
        span.set_status(Status(StatusCode.ERROR, plan.error_type))
    span.end(end_time=_ns(plan.end))


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _ns(moment: dt.datetime) -> int:
    """Nanoseconds since the epoch, exactly (no float rounding)."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000


# -- entry points --------------------------------------------------------------------


def export_task(task: Task) -> int:
    """Export one final task's trace now (spans are sent in the background)."""
    planned = plan_trace(task)
    return emit(planned) if planned is not None else 0


class Sent(NamedTuple):
    traces: int
    spans: int


def export_tasks(tasks: Iterable[Task]) -> Sent:
    """Export many final tasks; spans queued in the batch processor are flushed
    every few hundred so that its bounded queue never drops any."""
    traces = spans = pending = 0
    for task in tasks:
        count = export_task(task)
        traces += 1 if count else 0
        spans += count
        pending += count
        if pending >= 500:
            flush()
            pending = 0
    return Sent(traces, spans)


def flush(timeout_s: float = 30.0) -> bool:
    """Send what is queued; True when everything queued went out in time."""
    pipeline = _pipeline()
    # The background thread first: runs it has not read yet are in no batch. It
    # is one thread taking jobs in order, so once this no-op ran, they all did.
    try:
        pipeline.background.submit(lambda: None).result(timeout_s)
    except FutureTimeout:
        return False
    return pipeline.provider.force_flush(int(timeout_s * 1000))


def counts() -> ExportCounts:
    """Spans the collector accepted and refused since the pipeline was built."""
    exporter = _pipeline().exporter
    return ExportCounts(exporter.counts.exported, exporter.counts.failed)


def shutdown(timeout_s: float = 30.0) -> None:
    """Drain the background thread, send what is queued and stop the pipeline."""
    global _current
    with _lock:
        current, _current = _current, None
    if current is not None:
        current.close(timeout_s)


def on_task_finished(sender: object, *, task: Task, **_: Any) -> None:
    """Receiver of ``runs.ports.task_finished``: after commit, export ``task`` off
    the run's thread."""
    if not settings.REACH_OTEL_ENABLED:
        return
    task_id = task.pk
    transaction.on_commit(lambda: _submit(task_id))


def _submit(task_id: Any) -> Future[None] | None:
    try:
        return _pipeline().background.submit(_export_by_id, task_id)
    except Exception:  # noqa: BLE001 - telemetry never fails a run
        log.warning(
            "OpenTelemetry export of task %s not queued", task_id, exc_info=True
        )
        return None


def _export_by_id(task_id: Any) -> None:
    try:
        task = Task.objects.select_related("agent").get(pk=task_id)
        export_task(task)
    except Exception:  # noqa: BLE001 - telemetry never fails a run
        log.warning("OpenTelemetry export of task %s failed", task_id, exc_info=True)
    finally:
        # A thread of our own: Django never closes its connection, and an idle
        # one left open would hold a PostgreSQL slot (and block dropping a
        # test database).
        connection.close()
