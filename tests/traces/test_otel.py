"""Issue 14, part 1: runs exported as OpenTelemetry GenAI traces.

Runs are driven in-process through the real ``openai`` SDK against the scripted
model; the real OTLP/HTTP exporter sends them to a real receiver on loopback
(``tests.support.otlp_receiver``), which decodes the protobuf it gets. The database
is used transactionally: the export starts after the run's commit, on a thread of
its own that reads the committed rows.
"""

from __future__ import annotations

import datetime as dt
import io
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from approvals.models import ApprovalRequest
from registry.secrets import secret_set
from runs.models import Step, Task
from tests.support.cast import EDITED_EMAIL, QUESTION
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask, decide
from tests.support.scripted_model import RedisScript
from tests.support.waiting import wait_for
from traces import otel

pytestmark = pytest.mark.django_db(transaction=True)

CODE = "WOMBAT-7731"


def _point_at(monkeypatch: Any, settings: Any, endpoint: str, **env: str) -> None:
    """Export to ``endpoint``: the SDK reads the variables, the setting says go."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    # Batches leave at once instead of every 5 s (the SDK's default).
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings.REACH_OTEL_ENABLED = True


@pytest.fixture
def collector(monkeypatch: Any, settings: Any) -> Iterator[OtlpReceiver]:
    """A receiver on loopback that every finished run is exported to."""
    with OtlpReceiver() as receiver:
        _point_at(monkeypatch, settings, receiver.endpoint)
        yield receiver
        receiver.release()
        otel.shutdown(timeout_s=10)


def trace_of(collector: OtlpReceiver, task: Task) -> list[ReceivedSpan]:
    """What the collector holds of ``task``, once everything queued went out."""
    assert otel.flush(), "the exporter did not deliver in time"
    return collector.trace(task.pk.hex)


def by_name(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name]


def assert_times_of(span: ReceivedSpan, step: Step) -> None:
    assert (span.start, span.end) == (step.started_at, step.finished_at)


def test_a_finished_run_arrives_as_one_genai_trace_with_the_steps_times(
    alice, demo, model, collector
):
    model(RedisScript())
    task = ask(alice, demo.agent, QUESTION)
    assert task.status == "succeeded", task.error_message

    spans = trace_of(collector, task)
    steps = {s.seq: s for s in task.steps.all()}
    assert sorted(s.name for s in spans) == [
        "chat scripted-model",
        "chat scripted-model",
        "chat scripted-model",
        "execute_tool calculate",
        "execute_tool search_notes",
        "invoke_agent assistant",
    ]
    # One trace, whose id is the task's; every step hangs off the agent's span.
    [root] = by_name(spans, "invoke_agent assistant")
    assert root.parent_span_id == ""
    assert {s.trace_id for s in spans} == {task.pk.hex}
    assert all(s.parent_span_id == root.span_id for s in spans if s is not root)
    assert len({s.span_id for s in spans}) == len(spans)
    assert root.kind == "SPAN_KIND_INTERNAL"
    assert (root.start, root.end) == (task.created_at, task.finished_at)
    assert root.attributes == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "openai",
        "gen_ai.agent.id": str(demo.agent.pk),
        "gen_ai.agent.name": "assistant",
        "gen_ai.conversation.id": str(task.conversation_id),
        "gen_ai.request.model": "scripted-model",
        "gen_ai.usage.input_tokens": task.prompt_tokens,
        "gen_ai.usage.output_tokens": task.completion_tokens,
        "agent_reach.task.id": str(task.pk),
        "agent_reach.task.status": "succeeded",
        "agent_reach.task.stop_reason": "final_answer",
    }
    assert root.status == "STATUS_CODE_UNSET"
    assert root.resource["service.name"] == "agent-reach"
    assert root.scope_name == "agent_reach"
    assert root.schema_url == "https://opentelemetry.io/schemas/1.41.0"

    chats = sorted(
        by_name(spans, "chat scripted-model"),
        key=lambda s: s.attributes["agent_reach.step.seq"],
    )
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in chats] == [
        ["tool_calls"],
        ["tool_calls"],
        ["stop"],
    ]
    for chat in chats:
        step = steps[chat.attributes["agent_reach.step.seq"]]
        assert step.kind == "model_call"
        assert chat.kind == "SPAN_KIND_CLIENT"
        assert_times_of(chat, step)
        assert chat.attributes | {"gen_ai.response.finish_reasons": None} == {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.conversation.id": str(task.conversation_id),
            "gen_ai.request.model": "scripted-model",
            "gen_ai.response.model": step.model,
            "gen_ai.response.id": step.request_id,
            "gen_ai.usage.input_tokens": step.usage["prompt_tokens"],
            "gen_ai.usage.output_tokens": step.usage["completion_tokens"],
            "gen_ai.response.finish_reasons": None,
            "agent_reach.step.seq": step.seq,
            "agent_reach.step.status": "succeeded",
        }

    for name in ("search_notes", "calculate"):
        [span] = by_name(spans, f"execute_tool {name}")
        step = steps[span.attributes["agent_reach.step.seq"]]
        assert step.tool == name
        assert_times_of(span, step)
        assert span.kind == "SPAN_KIND_INTERNAL"
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.name"] == name
        assert span.attributes["gen_ai.tool.call.id"] == step.call_id
        assert span.attributes["gen_ai.tool.type"] == "function"
        assert span.attributes["agent_reach.tool.risk"] == "read_only"
        assert "error.type" not in span.attributes
    # Content is opt-in: none of it went out.
    for span in spans:
        assert not {
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.system_instructions",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        } & set(span.attributes)


def test_a_run_resumed_after_approvals_is_one_trace_with_each_human_wait_a_span(
    operator, collector, emails_waiting
):
    # ``collector`` is requested first: it listens before the run starts.
    task = emails_waiting
    assert task.status == "waiting_approval"
    # Parked is not finished: nothing is exported yet.
    assert trace_of(collector, task) == []
    task = decide(task, operator, "approve", arguments=EDITED_EMAIL)
    task = decide(task, operator, "reject", reason="not the boss")
    assert task.status == "succeeded", task.error_message

    spans = trace_of(collector, task)
    [root] = by_name(spans, "invoke_agent assistant")
    assert {s.trace_id for s in spans} == {task.pk.hex}
    assert all(s.parent_span_id == root.span_id for s in spans if s is not root)
    assert len(by_name(spans, "chat scripted-model")) == 3

    waits = by_name(spans, "await_approval send_email")
    approvals = list(ApprovalRequest.objects.filter(task=task).order_by("requested_at"))
    assert len(waits) == len(approvals) == 2
    for wait, approval in zip(
        sorted(waits, key=lambda s: s.start_ns), approvals, strict=True
    ):
        assert (wait.start, wait.end) == (approval.requested_at, approval.decided_at)
        assert wait.attributes["agent_reach.approval.id"] == str(approval.pk)
        assert wait.attributes["agent_reach.approval.decided_by"] == "operator"
        assert wait.attributes["agent_reach.approval.wait_s"] == pytest.approx(
            (approval.decided_at - approval.requested_at).total_seconds(), abs=1e-6
        )
        assert wait.attributes["gen_ai.tool.call.id"] == approval.step.call_id
    assert [
        w.attributes["agent_reach.approval.decision"]
        for w in sorted(waits, key=lambda s: s.start_ns)
    ] == ["approve", "reject"]

    sent, refused = sorted(
        by_name(spans, "execute_tool send_email"), key=lambda s: s.start_ns
    )
    sent_step = Step.objects.get(
        task=task, call_id=sent.attributes["gen_ai.tool.call.id"]
    )
    assert sent_step.status == "succeeded"
    assert_times_of(sent, sent_step)
    # The call ran after its approval, and the human's wait is not its latency.
    assert sent.start >= approvals[0].decided_at
    assert "error.type" not in sent.attributes
    assert refused.attributes["error.type"] == "rejected"
    assert refused.status == "STATUS_CODE_ERROR"
    assert refused.attributes["agent_reach.step.status"] == "rejected"


def test_content_goes_out_only_when_asked_for_and_then_redacted(
    alice, demo, model, collector, settings
):
    model(
        Script(
            [
                tool_call("calculate", {"expression": "1 + 1"}),
                text(f"2, for project {CODE}"),
            ]
        )
    )
    task = ask(alice, demo.agent, f"Add 1 + 1 for project {CODE}")
    assert task.status == "succeeded", task.error_message
    first = trace_of(collector, task)
    assert len(first) == 4
    assert not any("gen_ai.input.messages" in s.attributes for s in first)

    # Now the code is a stored secret, and content is asked for: the same run,
    # exported again, carries its messages and tool data, with the code redacted.
    secret_set(name="PROJECT_CODE", value=CODE)
    settings.REACH_OTEL_CAPTURE_CONTENT = True
    assert otel.export_task(task) == 4
    spans = trace_of(collector, task)[len(first) :]
    # The same trace: the span ids are fixed by the task, not drawn again.
    assert sorted(s.span_id for s in spans) == sorted(s.span_id for s in first)
    for span in spans:
        for value in span.attributes.values():
            assert CODE not in str(value)
    [root] = by_name(spans, "invoke_agent assistant")
    assert '"role": "user"' in root.attributes["gen_ai.input.messages"]
    assert "Add 1 + 1 for project [REDACTED" in root.attributes["gen_ai.input.messages"]
    assert "[REDACTED" in root.attributes["gen_ai.output.messages"]
    assert "gen_ai.system_instructions" in root.attributes
    [tool] = by_name(spans, "execute_tool calculate")
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"expression": "1 + 1"}'
    assert "2" in tool.attributes["gen_ai.tool.call.result"]
    first_chat = min(by_name(spans, "chat scripted-model"), key=lambda s: s.start_ns)
    assert '"type": "tool_call"' in first_chat.attributes["gen_ai.output.messages"]
    assert '"name": "calculate"' in first_chat.attributes["gen_ai.output.messages"]


def test_a_hung_collector_does_not_hold_up_the_run(alice, demo, model, collector):
    model(RedisScript())
    collector.hold()
    task = ask(alice, demo.agent, QUESTION)
    # The run is over while the collector has not answered a single request.
    assert task.status == "succeeded", task.error_message
    wait_for(lambda: collector.requests >= 1, 20, what="the export reaching it")
    assert collector.spans == []
    collector.release()
    assert len(trace_of(collector, task)) == 6


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_collector_is_a_log_line_not_a_failed_run(
    alice, demo, model, monkeypatch, settings, caplog
):
    model(RedisScript())
    _point_at(
        monkeypatch,
        settings,
        f"http://127.0.0.1:{_closed_port()}",
        OTEL_EXPORTER_OTLP_TIMEOUT="1",
    )
    caplog.set_level(logging.WARNING)
    try:
        task = ask(alice, demo.agent, QUESTION)
        assert task.status == "succeeded", task.error_message
        record = wait_for(
            lambda: next(
                (r for r in caplog.records if "not delivered" in r.getMessage()),
                None,
            ),
            15,
            what="a log line about the lost spans",
        )
        assert record.name == "traces.otel"
        wait_for(lambda: otel.counts().failed == 6, 15, what="all six spans lost")
        assert otel.counts().exported == 0
    finally:
        otel.shutdown(timeout_s=5)


def test_export_otel_sends_the_runs_finished_since_a_moment(
    alice, demo, model, monkeypatch, settings
):
    model(RedisScript())
    # Run while no collector is configured: nothing is exported then.
    settings.REACH_OTEL_ENABLED = False
    old = ask(alice, demo.agent, QUESTION)
    recent = ask(alice, demo.agent, QUESTION)
    assert old.status == recent.status == "succeeded"
    three_days_ago = timezone.now() - dt.timedelta(days=3)
    Task.objects.filter(pk=old.pk).update(finished_at=three_days_ago)

    with pytest.raises(CommandError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        call_command("export_otel", "--since", "1d")

    with OtlpReceiver() as receiver:
        _point_at(monkeypatch, settings, receiver.endpoint)
        out = io.StringIO()
        call_command("export_otel", "--since", "1d", stdout=out)
        assert "Exported 1 traces (6 spans): 6 spans accepted" in out.getvalue()
        assert {s.trace_id for s in receiver.spans} == {recent.pk.hex}

        since = (three_days_ago - dt.timedelta(days=1)).date().isoformat()
        call_command("export_otel", "--since", since, stdout=io.StringIO())
        assert {s.trace_id for s in receiver.spans} == {recent.pk.hex, old.pk.hex}
        assert len(receiver.trace(old.pk.hex)) == 6

        with pytest.raises(CommandError, match="--until"):
            call_command("export_otel", "--until", "last tuesday")
