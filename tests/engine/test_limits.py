"""Stop conditions, budgets and the execution engine, without Django.

Each test drives :class:`Engine` with the in-process :class:`FakeModel` and a
:class:`MemoryJournal`, and checks one condition: that it stops (or does not),
with which reason, and what the model and the journal saw.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from engine import execution
from engine.canonical import canonical_hash
from engine.execution import Executor, RetryableToolError, ToolError
from engine.journal import Outcome
from engine.memory_journal import MemoryJournal
from engine.spec import (
    ApprovalMode,
    Limits,
    Risk,
    StepKind,
    StepRecord,
    StepStatus,
    StopReason,
)
from tests.support.engine_doubles import (
    FakeModel,
    Hanging,
    advanced,
    journal,
    make_engine,
    model_calls,
    spec,
    tool_steps,
)
from tests.support.replies import text, tool_call, tool_calls
from tests.support.waiting import wait_for


def statuses(j: MemoryJournal) -> list[str]:
    """The statuses of the tool steps, in order."""
    return [s.status.value for s in tool_steps(j)]


def assert_stopped(j: MemoryJournal, reason: StopReason, says: str) -> None:
    """The task stopped for ``reason``, with no answer and a message saying ``says``."""
    stopped, answer, message = j.finished
    assert stopped is reason
    assert answer is None
    assert says in message


def tool_messages(request: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in request if m["role"] == "tool"]


class Counter:
    """A handler that counts its executions and echoes its argument."""

    def __init__(self, result: Callable[[dict[str, Any]], Any] | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._result = result

    def __call__(self, arguments: dict[str, Any], context: Any) -> Any:
        with self._lock:
            self.calls.append(dict(arguments))
        if self._result is not None:
            return self._result(arguments)
        return {"echo": arguments["x"]}


def failing(arguments: dict[str, Any], context: Any) -> Any:
    raise ToolError("upstream said no")


def advance_in_pool(engine: Any, j: MemoryJournal, *after: Callable[[], Any]) -> float:
    """``engine.advance(j)`` with model calls on their own pool, so the engine can
    abandon one; then ``after`` (releases, joins). -> the seconds it took."""
    engine.model_pool = ThreadPoolExecutor(2)
    engine.poll_interval_s = 0.05
    started = time.monotonic()
    try:
        engine.advance(j)
        return time.monotonic() - started
    finally:
        for cleanup in after:
            cleanup()
        engine.model_pool.shutdown(wait=True)


class FakeClock:
    def __init__(self) -> None:
        self.value = 1000.0

    def __call__(self) -> float:
        return self.value


# -- max_steps and max_tool_calls --------------------------------------------------


def test_max_steps_stops_after_that_many_model_calls_with_a_stop_message():
    model = FakeModel([tool_call("lookup", {"x": str(i)}) for i in range(10)])
    engine = make_engine(
        model, {"lookup": (spec("lookup"), Counter())}, limits=Limits(max_steps=3)
    )
    j = journal()

    assert engine.advance(j) is Outcome.FINISHED

    assert_stopped(j, StopReason.MAX_STEPS, "limit of model steps")
    assert len(model_calls(j)) == 3
    assert len(model.requests) == 3


def test_max_tool_calls_skips_calls_past_the_limit_and_stops_the_task():
    handler = Counter()
    model = FakeModel(
        [
            tool_calls(
                [("lookup", {"x": "a"}), ("lookup", {"x": "b"}), ("lookup", {"x": "c"})]
            )
        ]
    )
    j = advanced(
        model, {"lookup": (spec("lookup"), handler)}, limits=Limits(max_tool_calls=2)
    )

    assert_stopped(j, StopReason.MAX_TOOL_CALLS, "limit of tool calls")
    assert statuses(j) == ["succeeded", "succeeded", "skipped"]
    assert tool_steps(j)[2].error_class == "max_tool_calls"
    assert handler.calls == [{"x": "a"}, {"x": "b"}]
    # The stop comes before the model is asked again.
    assert len(model.requests) == 1


def test_max_tool_calls_counts_calls_across_turns():
    handler = Counter()
    model = FakeModel([tool_call("lookup", {"x": str(i)}) for i in range(5)])
    j = advanced(
        model, {"lookup": (spec("lookup"), handler)}, limits=Limits(max_tool_calls=3)
    )
    assert j.finished[0] is StopReason.MAX_TOOL_CALLS
    assert len(handler.calls) == 3


# -- repeated identical calls ------------------------------------------------------


def test_the_first_repeat_is_answered_from_the_earlier_result_with_a_note():
    handler = Counter()
    model = FakeModel(
        [
            tool_call("lookup", {"x": "a", "y": 1}),
            tool_call("lookup", '{"y": 1, "x": "a"}'),  # the same call, keys reordered
            text("done"),
        ]
    )
    lookup = spec(
        "lookup",
        parameters={
            "type": "object",
            "properties": {"x": {"type": "string"}, "y": {"type": "integer"}},
        },
    )
    j = advanced(model, {"lookup": (lookup, handler)})

    assert j.finished[0] is StopReason.FINAL_ANSWER
    assert len(handler.calls) == 1
    first, repeat = tool_steps(j)
    assert repeat.status is StepStatus.DEDUPLICATED
    assert repeat.result == first.result
    assert repeat.detail["same_as_seq"] == first.seq
    [note] = [s for s in j.steps if s.kind is StepKind.NOTE]
    assert note.detail["attach_to"] == repeat.seq
    assert note.detail["reason"] == "repeated_call"
    assert "already called lookup" in note.detail["text"]
    # The model gets the earlier result and the note inside the tool message.
    sent = json.loads(tool_messages(model.requests[2])[-1]["content"])
    assert sent["result"] == first.result
    assert "Change your plan or answer now" in sent["note"]
    # ... never as a user turn.
    users = [m["content"] for m in model.requests[2] if m["role"] == "user"]
    assert users == [j.goal]


def test_the_second_repeat_stops_the_task_with_repeated_call():
    handler = Counter()
    model = FakeModel([tool_call("lookup", {"x": "a"})] * 3 + [text("never")])
    j = advanced(model, {"lookup": (spec("lookup"), handler)})

    assert_stopped(j, StopReason.REPEATED_CALL, "repeating the same call")
    assert statuses(j) == ["succeeded", "deduplicated", "skipped"]
    assert tool_steps(j)[2].error_class == "repeated_call"
    assert len(handler.calls) == 1
    assert len(model.requests) == 3


def test_a_call_an_approver_rejected_is_not_asked_again_and_its_repeat_stops():
    sent: list[dict[str, Any]] = []
    email = spec("send_email", risk=Risk.IRREVERSIBLE, approval=ApprovalMode.ALWAYS)
    same = tool_call("send_email", {"x": "hi"})
    model = FakeModel([same, same, same, text("never")])
    engine = make_engine(model, {"send_email": (email, lambda a, c: sent.append(a))})
    j = journal()
    engine.advance(j)
    [asked] = tool_steps(j)
    assert asked.status is StepStatus.WAITING_APPROVAL
    j.decide(asked.seq, StepStatus.REJECTED, detail={**asked.detail, "reason": "no"})

    engine.advance(j)

    assert statuses(j) == ["rejected", "skipped", "skipped"]
    refused, stopped = tool_steps(j)[1:]
    # The first repeat is refused with the reason, no approval asked, run goes on.
    assert refused.error_class == "already_rejected"
    assert "approval" not in refused.detail
    assert f"already rejected this same call (step {asked.seq})" in (
        refused.error or ""
    )
    sent_back = tool_messages(model.requests[2])[-1]["content"]
    assert "already rejected" in sent_back
    # The second ends the task, as any repeated call does; nothing was ever sent.
    assert stopped.error_class == "repeated_call"
    assert_stopped(j, StopReason.REPEATED_CALL, "repeating the same call")
    assert sent == [] and len(model.requests) == 3


def test_a_rejected_call_with_other_arguments_is_asked_again():
    email = spec("send_email", risk=Risk.IRREVERSIBLE, approval=ApprovalMode.ALWAYS)
    model = FakeModel(
        [tool_call("send_email", {"x": "hi"}), tool_call("send_email", {"x": "bye"})]
    )
    engine = make_engine(model, {"send_email": (email, lambda a, c: {"sent": True})})
    j = journal()
    engine.advance(j)
    [asked] = tool_steps(j)
    j.decide(asked.seq, StepStatus.REJECTED, detail={**asked.detail, "reason": "no"})
    engine.advance(j)
    assert statuses(j) == ["rejected", "waiting_approval"]


def test_the_same_tool_with_other_arguments_is_not_a_repeat():
    handler = Counter()
    model = FakeModel(
        [tool_call("lookup", {"x": str(i)}) for i in range(3)] + [text("ok")]
    )
    j = advanced(model, {"lookup": (spec("lookup"), handler)})
    assert j.finished[0] is StopReason.FINAL_ANSWER
    assert len(handler.calls) == 3
    assert not [s for s in j.steps if s.kind is StepKind.NOTE]


# -- circuit breaker and tool_error_limit ------------------------------------------


def test_three_consecutive_failures_open_the_circuit_for_that_tool():
    calls_made: list[str] = []

    def flaky(arguments: dict[str, Any], context: Any) -> Any:
        calls_made.append(arguments["x"])
        raise ToolError("upstream said no")

    other = Counter()
    model = FakeModel(
        [tool_call("flaky", {"x": str(i)}) for i in range(4)]
        + [tool_call("other", {"x": "fine"}), text("gave up on flaky")]
    )
    j = advanced(
        model, {"flaky": (spec("flaky"), flaky), "other": (spec("other"), other)}
    )

    assert calls_made == ["0", "1", "2"]  # the fourth call was not executed
    fourth = tool_steps(j)[3]
    assert fourth.status is StepStatus.SKIPPED
    assert fourth.error_class == "circuit_open"
    assert "unavailable for this task" in fourth.error
    sent = json.loads(tool_messages(model.requests[4])[-1]["content"])
    assert "unavailable for this task" in sent["error"]
    # Other tools still run and the task goes on.
    assert other.calls == [{"x": "fine"}]
    assert j.finished[0] is StopReason.FINAL_ANSWER


def test_a_success_resets_the_failure_streak():
    outcomes = iter([False, False, True, False, False, False])
    ran: list[str] = []

    def sometimes(arguments: dict[str, Any], context: Any) -> Any:
        ran.append(arguments["x"])
        if not next(outcomes):
            raise ToolError("no")
        return "ok"

    model = FakeModel([tool_call("t", {"x": str(i)}) for i in range(6)] + [text("end")])
    j = advanced(model, {"t": (spec("t"), sometimes)})
    # fail, fail, ok, fail, fail: never three in a row, so all five ran; the
    # sixth comes after three in a row and is refused.
    assert len(ran) == 6
    assert tool_steps(j)[-1].status is StepStatus.FAILED
    assert j.finished[0] is StopReason.FINAL_ANSWER


def test_tool_error_limit_stops_the_task_when_errors_add_up_across_tools():
    model = FakeModel(
        [
            tool_call("a", {"x": "1"}),
            tool_call("b", {"x": "1"}),
            tool_call("a", {"x": "2"}),
        ]
        + [tool_call("b", {"x": "2"}), text("never")]
    )
    j = advanced(
        model,
        {"a": (spec("a"), failing), "b": (spec("b"), failing)},
        limits=Limits(tool_error_limit=3),
    )

    assert_stopped(j, StopReason.TOOL_ERROR_LIMIT, "too many tool errors")
    assert statuses(j) == ["failed"] * 3
    assert len(model.requests) == 3


# -- time and token budgets --------------------------------------------------------


def test_the_time_budget_stops_a_task_whose_active_time_ran_out():
    clock = FakeClock()

    def slow(arguments: dict[str, Any], context: Any) -> Any:
        clock.value += 30  # the tool took half a minute
        return "ok"

    model = FakeModel([tool_call("slow", {"x": str(i)}) for i in range(5)])
    engine = make_engine(
        model, {"slow": (spec("slow"), slow)}, limits=Limits(time_budget_s=60)
    )
    j = journal(now=clock)

    engine.advance(j)

    assert_stopped(j, StopReason.TIME_BUDGET, "time budget")
    assert len(tool_steps(j)) == 2


def test_time_parked_waiting_for_approval_is_not_counted_against_the_budget():
    clock = FakeClock()
    email = spec("send_email", risk=Risk.IRREVERSIBLE, approval=ApprovalMode.ALWAYS)
    model = FakeModel([tool_call("send_email", {"x": "hi"}), text("sent")])
    engine = make_engine(
        model,
        {"send_email": (email, lambda a, c: {"sent": True})},
        limits=Limits(time_budget_s=60),
    )
    j = journal(now=clock)

    assert engine.advance(j) is Outcome.PARKED
    clock.value += 3 * 3600  # the approver took three hours
    [step] = tool_steps(j)
    j.decide(
        step.seq,
        StepStatus.APPROVED,
        detail={**step.detail, "approved_hash": canonical_hash(step.arguments)},
    )

    assert engine.advance(j) is Outcome.FINISHED
    assert j.finished[:2] == (StopReason.FINAL_ANSWER, "sent")
    assert j.active_seconds() < 60


def test_the_time_budget_abandons_a_model_call_that_outlives_it():
    thinking = Hanging(text("too late"))
    engine = make_engine(FakeModel([thinking]), {}, limits=Limits(time_budget_s=0.3))
    j = journal()

    elapsed = advance_in_pool(engine, j, thinking.release)

    assert j.finished[0] is StopReason.TIME_BUDGET
    assert elapsed < 5
    assert model_calls(j) == []  # the abandoned answer was never recorded


def test_the_token_budget_stops_when_prompt_and_completion_tokens_reach_it():
    model = FakeModel(
        [tool_call("lookup", {"x": str(i)}) for i in range(5)],
        prompt_tokens=100,
        completion_tokens=50,
    )
    j = advanced(
        model, {"lookup": (spec("lookup"), Counter())}, limits=Limits(token_budget=300)
    )

    assert_stopped(j, StopReason.TOKEN_BUDGET, "token budget")
    assert len(model.requests) == 2
    assert j.usage.total_tokens == 300


# -- cancel ------------------------------------------------------------------------


def test_a_cancelled_task_stops_at_the_next_step_boundary():
    j = journal()

    def cancel_after(arguments: dict[str, Any]) -> Any:
        j.cancelled = True  # the user pressed Cancel while the tool ran
        return "ok"

    model = FakeModel([tool_call("lookup", {"x": "a"}), text("never asked")])
    engine = make_engine(model, {"lookup": (spec("lookup"), Counter(cancel_after))})

    engine.advance(j)

    assert j.finished == (StopReason.CANCELLED, None, None)
    assert tool_steps(j)[0].status is StepStatus.SUCCEEDED
    assert len(model.requests) == 1


def test_a_cancel_between_writes_keeps_the_later_writes_from_running():
    j = journal()
    ran: list[str] = []

    def write(arguments: dict[str, Any], context: Any) -> Any:
        ran.append(arguments["x"])
        j.cancelled = True
        return "written"

    ticket = spec("ticket", risk=Risk.WRITE)
    model = FakeModel([tool_calls([("ticket", {"x": "1"}), ("ticket", {"x": "2"})])])
    engine = make_engine(model, {"ticket": (ticket, write)})

    engine.advance(j)

    assert ran == ["1"]
    assert j.finished[0] is StopReason.CANCELLED


def test_cancel_abandons_an_in_flight_model_call():
    j = journal()
    thinking = Hanging(text("too late"))
    engine = make_engine(FakeModel([thinking]), {})

    def cancel_when_asked() -> None:
        thinking.asked.wait(10)
        j.cancelled = True

    canceller = threading.Thread(target=cancel_when_asked)
    canceller.start()
    elapsed = advance_in_pool(engine, j, thinking.release, canceller.join)

    assert j.finished[0] is StopReason.CANCELLED
    assert elapsed < 5
    assert model_calls(j) == []


# -- per-tool timeout and the abandoned-thread cap ---------------------------------


def test_a_hung_handler_is_abandoned_at_its_timeout_and_the_task_goes_on():
    hang = Hanging()
    model = FakeModel([tool_call("hang", {"x": "1"}), text("gave up")])
    executor = Executor(max_threads=4)
    engine = make_engine(
        model, {"hang": (spec("hang", timeout_s=0.2), hang)}, executor=executor
    )
    j = journal()
    started = time.monotonic()
    engine.advance(j)
    elapsed = time.monotonic() - started

    assert elapsed < 5
    [step] = tool_steps(j)
    assert step.status is StepStatus.FAILED and step.error_class == "timeout"
    assert "did not answer within 0.2 s" in step.error
    assert j.finished == (StopReason.FINAL_ANSWER, "gave up", None)
    assert executor.abandoned == 1
    hang.release()
    # The thread comes back and is counted off.
    wait_for(lambda: executor.abandoned == 0, 5, interval=0.01)
    assert executor.abandoned == 0


def test_past_the_abandoned_thread_cap_further_calls_fail_at_once():
    hang = Hanging()
    executor = Executor(max_threads=8, max_abandoned=2)
    model = FakeModel(
        [tool_call("hang", {"x": str(i)}) for i in range(3)] + [text("ok")]
    )
    engine = make_engine(
        model,
        {"hang": (spec("hang", timeout_s=0.2), hang)},
        executor=executor,
        limits=Limits(consecutive_failure_limit=10),
    )
    j = journal()
    try:
        engine.advance(j)
    finally:
        hang.release()

    assert hang.started == ["0", "1"]  # the third never reached a thread
    third = tool_steps(j)[2]
    assert third.error_class == "overloaded"
    assert third.attempts[0]["duration_ms"] == 0.0


def test_a_call_that_timed_out_while_queued_never_runs_later():
    hang = Hanging()
    executor = Executor(max_threads=1, max_abandoned=5)
    hang_spec = spec("hang", timeout_s=0.2)
    model = FakeModel(
        [tool_call("hang", {"x": "a"}), tool_call("hang", {"x": "b"}), text("ok")]
    )
    engine = make_engine(model, {"hang": (hang_spec, hang)}, executor=executor)
    engine.advance(journal())
    hang.release()
    executor.shutdown()
    executor._pool.shutdown(wait=True)
    assert hang.started == ["a"]
    assert executor.abandoned == 0


# -- retries -----------------------------------------------------------------------


def test_read_only_retries_back_off_exponentially_with_jitter(monkeypatch):
    sleeps: list[float] = []
    jitter = iter([0.0, 0.999])
    monkeypatch.setattr(execution.random, "random", lambda: next(jitter))
    attempts: list[int] = []

    def flaky(arguments: dict[str, Any], context: Any) -> Any:
        attempts.append(1)
        if len(attempts) < 3:
            raise RetryableToolError("503 from upstream")
        return "fine"

    executor = Executor(backoff_base_s=1.0, backoff_cap_s=60, sleep=sleeps.append)
    model = FakeModel([tool_call("flaky", {"x": "1"}), text("ok")])
    j = advanced(
        model, {"flaky": (spec("flaky", max_retries=3), flaky)}, executor=executor
    )

    # base * 2**(n-1), scaled into [0.5, 1) by the jitter.
    assert sleeps == pytest.approx([0.5, 2 * (0.5 + 0.999 / 2)])
    [step] = tool_steps(j)
    assert step.status is StepStatus.SUCCEEDED
    assert [a["number"] for a in step.attempts] == [1, 2, 3]
    assert [a["error_class"] for a in step.attempts] == ["transient", "transient", None]
    assert "503 from upstream" in step.attempts[0]["error"]


def test_an_idempotent_write_is_retried_but_a_plain_write_is_not():
    tries: dict[str, int] = {"keyed": 0, "plain": 0}

    def make(name: str) -> Callable[[dict[str, Any], Any], Any]:
        def handler(arguments: dict[str, Any], context: Any) -> Any:
            tries[name] += 1
            raise RetryableToolError("try again")

        return handler

    model = FakeModel(
        [tool_calls([("keyed", {"x": "1"}), ("plain", {"x": "1"})]), text("ok")]
    )
    j = advanced(
        model,
        {
            "keyed": (
                spec("keyed", risk=Risk.WRITE, idempotent=True, max_retries=2),
                make("keyed"),
            ),
            "plain": (spec("plain", risk=Risk.WRITE, max_retries=2), make("plain")),
        },
        executor=Executor(backoff_base_s=0.001),
    )
    assert tries == {"keyed": 3, "plain": 1}
    keyed, plain = tool_steps(j)
    assert len(keyed.attempts) == 3 and len(plain.attempts) == 1


def test_a_tool_error_meant_for_the_model_is_not_retried():
    handler = Counter(lambda a: (_ for _ in ()).throw(ToolError("bad input")))
    model = FakeModel([tool_call("t", {"x": "1"}), text("ok")])
    engine = make_engine(
        model,
        {"t": (spec("t", max_retries=3), handler)},
        executor=Executor(backoff_base_s=0.001),
    )
    engine.advance(journal())
    assert len(handler.calls) == 1


# -- result shaping ----------------------------------------------------------------


def test_an_oversize_result_reaches_the_model_truncated_with_an_explicit_marker():
    big = "x" * 500
    model = FakeModel([tool_call("big", {"x": "1"}), text("ok")])
    j = advanced(model, {"big": (spec("big", max_result_chars=100), lambda a, c: big)})

    content = tool_messages(model.requests[1])[-1]["content"]
    sent = json.loads(content)
    assert sent["truncated"] is True
    assert sent["partial_result"].startswith('"xxx')
    assert "truncated by Agent Reach: 100 of 502 characters shown" in content
    assert len(content) < 300
    assert tool_steps(j)[0].result == big  # the trace keeps what the tool returned


def test_result_fields_trim_a_structured_result_to_the_fields_that_matter():
    payload = {
        "id": 7,
        "name": "Ada",
        "internal": {"etag": "abc", "debug": [1, 2, 3]},
        "address": {"city": "Paris", "zip": "75001"},
    }
    model = FakeModel([tool_call("user", {"x": "1"}), text("ok")])
    j = advanced(
        model,
        {
            "user": (
                spec("user", result_fields=("/name", "/address/city")),
                lambda a, c: payload,
            )
        },
    )
    assert tool_steps(j)[0].result == {"name": "Ada", "address": {"city": "Paris"}}
    assert json.loads(tool_messages(model.requests[1])[-1]["content"]) == {
        "name": "Ada",
        "address": {"city": "Paris"},
    }


def test_result_fields_apply_to_each_item_of_a_list():
    rows = [{"title": "a", "body": "long"}, {"title": "b", "body": "longer"}]
    model = FakeModel([tool_call("rows", {"x": "1"}), text("ok")])
    j = advanced(
        model, {"rows": (spec("rows", result_fields=("/title",)), lambda a, c: rows)}
    )
    assert tool_steps(j)[0].result == [{"title": "a"}, {"title": "b"}]


def test_a_repeated_call_gets_the_earlier_result_within_the_same_size_limit():
    model = FakeModel(
        [tool_call("big", {"x": "1"}), tool_call("big", {"x": "1"}), text("ok")]
    )
    engine = make_engine(
        model, {"big": (spec("big", max_result_chars=100), lambda a, c: "y" * 500)}
    )
    engine.advance(journal())
    content = tool_messages(model.requests[2])[-1]["content"]
    sent = json.loads(content)
    assert sent["result"]["truncated"] is True
    assert "truncated by Agent Reach" in content
    assert sent["note"]
    assert len(content) < 500


# -- cache and rate limit (engine side; Redis in tests/runs) ---------------------


class DictCache:
    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.ttls: dict[str, int] = {}

    def get(self, key: str) -> Any | None:
        return self.values.get(key)

    def set(self, key: str, value: Any, ttl_s: int) -> None:
        self.values[key] = value
        self.ttls[key] = ttl_s


def test_a_cached_read_only_result_is_served_from_the_cache_and_marked_cached():
    cache = DictCache()
    handler = Counter()
    weather = spec("weather", cache_ttl_s=300)
    for _ in range(2):
        model = FakeModel([tool_call("weather", {"x": "Paris"}), text("sunny")])
        engine = make_engine(
            model, {"weather": (weather, handler)}, executor=Executor(cache=cache)
        )
        j = journal()
        engine.advance(j)
    assert len(handler.calls) == 1
    assert tool_steps(j)[0].status is StepStatus.CACHED
    assert tool_steps(j)[0].result == {"echo": "Paris"}
    assert list(cache.ttls.values()) == [300]


def test_writes_are_never_cached_even_with_a_ttl():
    cache = DictCache()
    handler = Counter()
    ticket = spec("ticket", risk=Risk.WRITE, cache_ttl_s=300)
    for _ in range(2):
        model = FakeModel([tool_call("ticket", {"x": "a"}), text("ok")])
        make_engine(
            model, {"ticket": (ticket, handler)}, executor=Executor(cache=cache)
        ).advance(journal())
    assert len(handler.calls) == 2
    assert cache.values == {}


def test_a_new_tool_version_does_not_reuse_the_old_versions_cache():
    executor = Executor()
    v1 = spec("weather", cache_ttl_s=60, version=1)
    v2 = spec("weather", cache_ttl_s=60, version=2)
    assert executor.cache_key(v1, {"x": "a"}) != executor.cache_key(v2, {"x": "a"})
    assert executor.cache_key(v1, {"x": "a", "y": 1}) == executor.cache_key(
        v1, {"y": 1, "x": "a"}
    )


class Limited:
    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self.asked: list[tuple[str, int]] = []

    def acquire(self, tool: str, per_minute: int) -> float:
        self.asked.append((tool, per_minute))
        return self.wait_s


def test_a_rate_limited_call_is_an_observation_to_wait_not_a_crash_or_an_error():
    handler = Counter()
    limiter = Limited(42)
    model = FakeModel([tool_call("api", {"x": "1"}), text("I will try later")])
    j = advanced(
        model,
        {"api": (spec("api", rate_limit_per_min=5), handler)},
        executor=Executor(rate_limiter=limiter),
        limits=Limits(tool_error_limit=1),
    )

    assert handler.calls == []
    assert limiter.asked == [("api", 5)]
    [step] = tool_steps(j)
    assert step.status is StepStatus.SKIPPED
    assert step.error_class == "rate_limited"
    sent = json.loads(tool_messages(model.requests[1])[-1]["content"])
    assert "Try again in about 42 s" in sent["error"]
    # Not a tool error: tool_error_limit=1 did not stop the task.
    assert j.finished[:2] == (StopReason.FINAL_ANSWER, "I will try later")


# -- parallel reads, sequential writes ---------------------------------------------


def test_read_only_calls_run_concurrently_but_no_more_than_the_bound():
    pair = threading.Barrier(2, timeout=5)
    lock = threading.Lock()
    active = [0, 0]  # now, peak

    def read(arguments: dict[str, Any], context: Any) -> Any:
        with lock:
            active[0] += 1
            active[1] = max(active[1], active[0])
        pair.wait()  # passes only when two run at once
        with lock:
            active[0] -= 1
        return arguments["x"]

    names = [str(i) for i in range(6)]
    model = FakeModel([tool_calls([("read", {"x": n}) for n in names]), text("ok")])
    j = advanced(
        model,
        {"read": (spec("read", timeout_s=6), read)},
        limits=Limits(parallel_tool_calls=2),
    )

    assert active[1] == 2
    assert [s.result for s in tool_steps(j)] == names
    contents = [m["content"] for m in tool_messages(model.requests[1])]
    assert contents == [json.dumps(n) for n in names]


def test_writes_run_one_by_one_in_the_models_order_and_reads_around_them_wait():
    log: list[str] = []
    lock = threading.Lock()

    def handler(arguments: dict[str, Any], context: Any) -> Any:
        with lock:
            log.append("start " + arguments["x"])
        time.sleep(0.02)  # give an overlapping call the chance to show
        with lock:
            log.append("end " + arguments["x"])
        return arguments["x"]

    read = spec("read", timeout_s=5)
    write = spec("write", risk=Risk.WRITE, timeout_s=5)
    order = [("read", "r1"), ("read", "r2"), ("write", "w1"), ("write", "w2")]
    order += [("read", "r3")]
    model = FakeModel([tool_calls([(n, {"x": x}) for n, x in order]), text("ok")])
    j = advanced(model, {"read": (read, handler), "write": (write, handler)})

    def at(entry: str) -> int:
        return log.index(entry)

    assert {log[0], log[1]} == {"start r1", "start r2"}  # reads together
    assert at("start w1") > max(at("end r1"), at("end r2"))
    assert at("start w2") > at("end w1")  # one write at a time, in order
    assert at("start r3") > at("end w2")  # a later read sees the writes
    assert [s.result for s in tool_steps(j)] == ["r1", "r2", "w1", "w2", "r3"]


# -- resume ------------------------------------------------------------------------


def test_a_resumed_run_never_repeats_a_completed_tool_call():
    handler = Counter()
    # The answer of the model call cut short by the crash was never recorded, so
    # that call is made again; the tool call before it is not.
    model = FakeModel([tool_call("lookup", {"x": "a"}), text("lost"), text("done")])
    engine = make_engine(model, {"lookup": (spec("lookup"), handler)})
    j = journal()
    # The worker dies right after the tool's result was committed.
    original = j.append

    def die_before_the_next_model_step(steps: list[StepRecord]) -> Any:
        if any(s.kind is StepKind.MODEL_CALL for s in steps) and tool_steps(j):
            raise KeyboardInterrupt("worker died")
        return original(steps)

    j.append = die_before_the_next_model_step  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        engine.advance(j)
    j.append = original  # type: ignore[method-assign]
    assert len(handler.calls) == 1

    engine.advance(j)

    assert len(handler.calls) == 1
    assert j.finished[:2] == (StopReason.FINAL_ANSWER, "done")


def test_a_write_that_was_running_when_the_worker_died_goes_to_a_human():
    ran: list[str] = []
    ticket = spec("ticket", risk=Risk.WRITE)
    model = FakeModel([tool_call("ticket", {"x": "a"}), text("done")])
    engine = make_engine(model, {"ticket": (ticket, lambda a, c: ran.append("x"))})
    j = journal()
    original = j.update

    def die_after_start(step: StepRecord) -> StepRecord:
        stored = original(step)
        if step.status is StepStatus.RUNNING and step.started_at is not None:
            raise KeyboardInterrupt("worker died mid-call")
        return stored

    j.update = die_after_start  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        engine.advance(j)
    j.update = original  # type: ignore[method-assign]

    assert engine.advance(j) is Outcome.PARKED
    assert ran == []
    assert tool_steps(j)[0].error_class == "outcome_unknown"
