"""The agent loop, without Django: model -> parse -> validate -> execute -> observe."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import threading
import time
from typing import Any

import pytest

from engine.execution import Executor
from engine.journal import Outcome
from engine.model_client import ModelError
from engine.spec import (
    ApprovalMode,
    Attempt,
    Limits,
    Risk,
    StepKind,
    StepStatus,
    StopReason,
    utcnow,
)
from tests.support.engine_doubles import (
    FakeModel,
    Hanging,
    advanced,
    calculator,
    journal,
    make_engine,
    model_error,
    spec,
    tool_steps,
)
from tests.support.replies import text, tool_call, tool_calls


def test_a_tool_call_is_executed_and_its_result_goes_back_as_a_tool_message():
    model = FakeModel(
        [tool_call("calculate", {"expression": "128 * 6 + 320"}), text("1088")]
    )
    engine = make_engine(model, calculator())
    j = journal()

    assert engine.advance(j) is Outcome.FINISHED

    assert j.finished == (StopReason.FINAL_ANSWER, "1088", None)
    [step] = tool_steps(j)
    assert step.status is StepStatus.SUCCEEDED
    assert step.arguments == {"expression": "128 * 6 + 320"}
    assert step.result == {"expression": "128 * 6 + 320", "result": 1088}
    assert step.idempotency_key == "t1:1:0"
    second = model.requests[1]
    assert second[-1]["role"] == "tool"
    assert second[-1]["tool_call_id"] == step.call_id
    assert json.loads(second[-1]["content"])["result"] == 1088
    # The user's goal stays the last user message.
    assert [m for m in second if m["role"] == "user"][-1]["content"] == j.goal


def test_seqs_are_assigned_at_planning_in_call_order():
    model = FakeModel(
        [
            tool_calls(
                [
                    ("calculate", {"expression": "1+1"}),
                    ("calculate", {"expression": "2+2"}),
                ],
            ),
            text("done"),
        ]
    )
    j = advanced(model, calculator())
    kinds = [(s.seq, s.kind.value, s.call_index) for s in j.steps]
    assert kinds == [
        (1, "model_call", None),
        (2, "tool_call", 0),
        (3, "tool_call", 1),
        (4, "model_call", None),
    ]


def the_call(reply: Any, tools: dict[str, Any]) -> tuple[Any, FakeModel]:
    """Run one turn calling ``reply``'s tool, then "ok"; its step and the model."""
    model = FakeModel([reply, text("ok")])
    j = journal()
    make_engine(model, tools).advance(j)
    assert j.finished[0] is StopReason.FINAL_ANSWER
    [step] = tool_steps(j)
    return step, model


def test_a_tool_that_raises_becomes_an_error_observation():
    def boom(arguments: dict[str, Any], context: Any) -> Any:
        raise RuntimeError("disk on fire")

    step, model = the_call(
        tool_call("boom", {"x": "1"}), {"boom": (spec("boom"), boom)}
    )
    assert step.status is StepStatus.FAILED
    assert "disk on fire" in step.error
    assert "error" in json.loads(model.requests[1][-1]["content"])


def test_a_tool_that_hangs_past_its_timeout_is_abandoned():
    hang = Hanging()
    started = time.monotonic()
    step, _ = the_call(
        tool_call("hang", {"x": "1"}), {"hang": (spec("hang", timeout_s=0.2), hang)}
    )
    elapsed = time.monotonic() - started
    hang.release()
    assert step.status is StepStatus.FAILED
    assert step.error_class == "timeout"
    assert elapsed < 5


#: id -> (the call, the tools, its error class, what the error names)
CANNOT_RUN = {
    "a tool that returns garbage": (
        tool_call("junk", {"x": "1"}),
        {"junk": (spec("junk"), lambda a, c: object())},
        "bad_result",
        "",
    ),
    "invalid arguments": (
        tool_call("calculate", {"expr": "1+1"}),
        calculator(),
        "invalid_arguments",
        "expression",  # what is expected
    ),
    "malformed json arguments": (
        tool_call("calculate", '{"expression": "1+1"'),
        calculator(),
        "invalid_json",
        "",
    ),
    "an unknown tool": (
        tool_call("search_web", {"q": "x"}),
        calculator(),
        "unknown_tool",
        "calculate",  # the available tools
    ),
}


@pytest.mark.parametrize(
    ("reply", "tools", "error_class", "says"),
    list(CANNOT_RUN.values()),
    ids=list(CANNOT_RUN),
)
def test_a_call_that_cannot_run_is_a_failed_step_that_says_why(
    reply, tools, error_class, says
):
    step, _ = the_call(reply, tools)
    assert step.status is StepStatus.FAILED
    assert step.error_class == error_class
    assert says in step.error


def test_malformed_json_arguments_are_kept_raw_and_not_parsed():
    step, _ = the_call(tool_call("calculate", '{"expression": "1+1"'), calculator())
    assert step.arguments is None
    assert step.raw_arguments == '{"expression": "1+1"'


def test_max_steps_stops_the_loop():
    model = FakeModel(
        [tool_call("calculate", {"expression": f"{i}+1"}) for i in range(10)]
    )
    j = advanced(model, calculator(), limits=Limits(max_steps=3))
    assert j.finished[0] is StopReason.MAX_STEPS
    assert sum(1 for s in j.steps if s.kind is StepKind.MODEL_CALL) == 3


def test_a_model_that_stays_down_fails_the_task_with_an_actionable_message():
    model = FakeModel([model_error()])
    j = advanced(model, calculator())
    assert j.finished[0] is StopReason.MODEL_ERROR
    assert "down" in j.finished[2]
    [step] = j.steps
    assert step.kind is StepKind.MODEL_CALL and step.status is StepStatus.FAILED


def test_a_failed_model_call_lasts_from_its_first_attempt_to_its_last():
    first = utcnow() - dt.timedelta(seconds=4)
    down = ModelError(
        "The model server answered 500.",
        kind="server",
        attempts=[
            Attempt(1, first.isoformat(), 1300.0, "500", "server"),
            Attempt(2, (first + dt.timedelta(seconds=2)).isoformat(), 1300.0, "500"),
        ],
    )
    j = advanced(FakeModel([down]), calculator())

    [step] = j.steps
    assert step.started_at == first
    assert step.duration_ms is not None and step.duration_ms >= 4000


def test_a_call_needing_approval_parks_the_run_and_resumes_after_approval():
    calls_made = []

    def send(arguments: dict[str, Any], context: Any) -> Any:
        calls_made.append((arguments, context.idempotency_key))
        return {"sent": True}

    email = spec("send_email", risk=Risk.IRREVERSIBLE, approval=ApprovalMode.ALWAYS)
    model = FakeModel([tool_call("send_email", {"x": "hi"}), text("sent it")])
    engine = make_engine(model, {"send_email": (email, send)})
    j = journal()

    assert engine.advance(j) is Outcome.PARKED
    [step] = tool_steps(j)
    assert step.status is StepStatus.WAITING_APPROVAL
    assert step.detail["approval"]["reasons"]
    assert calls_made == []

    from engine.canonical import canonical_hash

    j.decide(
        step.seq,
        StepStatus.APPROVED,
        detail={**step.detail, "approved_hash": canonical_hash(step.arguments)},
    )
    assert engine.advance(j) is Outcome.FINISHED
    assert calls_made == [({"x": "hi"}, "t1:1:0")]
    assert tool_steps(j)[0].status is StepStatus.SUCCEEDED


def test_an_approved_call_with_other_arguments_refuses_to_run():
    ran = []
    email = spec("send_email", risk=Risk.IRREVERSIBLE, approval=ApprovalMode.ALWAYS)
    model = FakeModel([tool_call("send_email", {"x": "hi"}), text("ok")])
    engine = make_engine(model, {"send_email": (email, lambda a, c: ran.append(a))})
    j = journal()
    engine.advance(j)
    step = tool_steps(j)[0]
    j.decide(
        step.seq,
        StepStatus.APPROVED,
        arguments={"x": "other"},
        detail={**step.detail, "approved_hash": "0" * 64},
    )
    engine.advance(j)
    assert ran == []
    assert tool_steps(j)[0].error_class == "approval_mismatch"


def test_rejection_reason_reaches_the_model():
    email = spec("send_email", risk=Risk.IRREVERSIBLE, approval=ApprovalMode.ALWAYS)
    model = FakeModel([tool_call("send_email", {"x": "hi"}), text("ok, I won't")])
    engine = make_engine(model, {"send_email": (email, lambda a, c: {"sent": True})})
    j = journal()
    engine.advance(j)
    step = tool_steps(j)[0]
    j.decide(
        step.seq, StepStatus.REJECTED, detail={**step.detail, "reason": "not today"}
    )
    engine.advance(j)
    last_tool_message = model.requests[1][-1]
    assert last_tool_message["role"] == "tool"
    assert "not today" in last_tool_message["content"]


def test_secrets_are_redacted_from_arguments_before_they_are_persisted():
    from engine.redaction import Redactor

    seen = []
    model = FakeModel(
        [tool_call("echo", {"x": "key sk-abcdefghijklmnopqrstuv"}), text("ok")]
    )
    engine = make_engine(
        model, {"echo": (spec("echo"), lambda a, c: seen.append(a) or a)}
    )
    engine.redactor = Redactor()
    j = journal()
    engine.advance(j)
    step = tool_steps(j)[0]
    assert "sk-abc" not in json.dumps(step.arguments)
    assert "sk-abc" not in (step.raw_arguments or "")
    assert "[REDACTED:api_key]" in step.arguments["x"]
    assert seen == [step.arguments]


def test_read_only_calls_of_one_turn_run_concurrently_and_results_keep_call_order():
    barrier = threading.Barrier(3, timeout=5)

    def slow(arguments: dict[str, Any], context: Any) -> Any:
        barrier.wait()  # only passes if all three run at once
        return arguments["x"]

    model = FakeModel(
        [
            tool_calls(
                [("slow", {"x": "a"}), ("slow", {"x": "b"}), ("slow", {"x": "c"})]
            ),
            text("ok"),
        ]
    )
    j = advanced(
        model,
        {"slow": (spec("slow", timeout_s=6), slow)},
        limits=Limits(parallel_tool_calls=4),
    )
    assert [s.result for s in tool_steps(j)] == ["a", "b", "c"]
    contents = [m["content"] for m in model.requests[1] if m["role"] == "tool"]
    assert contents == ['"a"', '"b"', '"c"']


def test_the_executor_retries_read_only_tools_with_each_attempt_recorded():
    attempts = []

    def flaky(arguments: dict[str, Any], context: Any) -> Any:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("try again")
        return "fine"

    model = FakeModel([tool_call("flaky", {"x": "1"}), text("ok")])
    j = advanced(
        model,
        {"flaky": (spec("flaky", max_retries=3), flaky)},
        executor=Executor(backoff_base_s=0.001),
    )
    step = tool_steps(j)[0]
    assert step.status is StepStatus.SUCCEEDED
    assert len(step.attempts) == 3
    assert step.attempts[0]["error"]


def test_writes_are_not_retried():
    attempts = []

    def flaky(arguments: dict[str, Any], context: Any) -> Any:
        attempts.append(1)
        raise RuntimeError("nope")

    model = FakeModel([tool_call("flaky", {"x": "1"}), text("ok")])
    engine = make_engine(
        model, {"flaky": (spec("flaky", risk=Risk.WRITE, max_retries=3), flaky)}
    )
    engine.advance(journal())
    assert len(attempts) == 1


def test_a_resumed_run_continues_from_persisted_steps_without_asking_the_model_again():
    model = FakeModel([tool_call("calculate", {"expression": "2+2"}), text("4")])
    engine = make_engine(model, calculator())
    j = journal()
    # Simulate a crash right after the model reply was persisted.
    original_update = j.update
    crashed = {"done": False}

    def crash_once(step):
        if not crashed["done"]:
            crashed["done"] = True
            raise KeyboardInterrupt("worker died")
        return original_update(step)

    j.update = crash_once  # type: ignore[method-assign]
    with contextlib.suppress(KeyboardInterrupt):
        engine.advance(j)
    assert len(model.requests) == 1
    j.update = original_update  # type: ignore[method-assign]
    engine.advance(j)
    assert len(model.requests) == 2
    assert j.finished[1] == "4"
    assert tool_steps(j)[0].result["result"] == 4


def test_a_write_abandoned_at_its_timeout_is_handed_to_an_operator_not_failed():
    stuck_write = Hanging(result={"done": True})
    write = spec("stuck_write", risk=Risk.WRITE, timeout_s=0.2)
    model = FakeModel([tool_call("stuck_write", {"x": "1"}), text("ok")])
    engine = make_engine(model, {"stuck_write": (write, stuck_write)})
    j = journal()
    assert engine.advance(j) is Outcome.PARKED
    stuck_write.release()
    [step] = tool_steps(j)
    assert step.status is StepStatus.WAITING_APPROVAL
    assert step.error_class == "outcome_unknown"
    assert len(model.requests) == 1
