"""The public planning of a model turn: what live runs and forks both call."""

from __future__ import annotations

from engine.planning import Planner
from engine.spec import (
    ApprovalMode,
    DetailKey,
    ErrorClass,
    Limits,
    StepKind,
    StepRecord,
    StepStatus,
    StopReason,
    ToolCall,
)
from tests.support.engine_doubles import (
    FakeModel,
    calculator,
    calculator_spec,
    journal,
    make_engine,
    spec,
)
from tests.support.replies import text, tool_call, tool_calls


def turn(seq: int) -> StepRecord:
    return StepRecord(seq=seq, kind=StepKind.MODEL_CALL, status=StepStatus.SUCCEEDED)


def call(index: int, expression: str, name: str = "calculate") -> ToolCall:
    return ToolCall(
        call_id=f"c{index}",
        name=name,
        raw_arguments=f'{{"expression": "{expression}"}}',
        index=index,
    )


def done(seq: int, parent: int, expression: str, **changes: object) -> StepRecord:
    """A finished calculate step, planned as a live run plans it."""
    planned = Planner({"calculate": calculator_spec()}).plan_call(
        call(seq - parent - 1, expression)
    )
    return planned.copy(
        seq=seq,
        parent_seq=parent,
        status=StepStatus.SUCCEEDED,
        result={"result": expression},
        **changes,
    )


def test_a_turn_is_planned_with_seqs_keys_and_parent_after_its_model_call():
    planner = Planner({"calculate": calculator_spec()})

    plan = planner.plan_turn(
        turn(5), [call(0, "1+1"), call(1, "2+2")], steps=[], task_id="t"
    )

    assert [(s.seq, s.parent_seq, s.idempotency_key) for s in plan.calls] == [
        (6, 5, "t:5:0"),
        (7, 5, "t:5:1"),
    ]
    assert [s.status for s in plan.calls] == [StepStatus.RUNNING] * 2
    assert plan.notes == [] and plan.stop is None


def test_plan_turn_writes_the_same_steps_a_live_run_writes():
    model = FakeModel(
        [
            tool_call("calculate", {"expression": "1+1"}),
            tool_calls(
                [
                    ("calculate", {"expression": "1+1"}),
                    ("calculate", {"expression": "3+3"}),
                ]
            ),
            text("done"),
        ]
    )
    j = journal()
    make_engine(model, calculator(), limits=Limits(max_tool_calls=2)).advance(j)
    first_turn = [s for s in j.steps if s.seq <= 2]
    live_turn = [s for s in j.steps if s.seq > 3]

    plan = Planner(
        {"calculate": calculator_spec()}, Limits(max_tool_calls=2)
    ).plan_turn(
        j.steps[2],
        [call(0, "1+1"), call(1, "3+3")],
        steps=first_turn,
        task_id="t1",
    )

    def shape(s: StepRecord) -> tuple[object, ...]:
        return (s.seq, s.kind, s.status, s.error_class, s.result, s.detail)

    assert [shape(s) for s in plan.steps] == [shape(s) for s in live_turn]
    assert plan.stop is StopReason.MAX_TOOL_CALLS
    assert j.steps[2].detail[DetailKey.STOP] == "max_tool_calls"


def test_re_planning_the_rest_of_a_turn_sees_its_earlier_calls_as_done():
    # A fork from seq 3: seq 2 (the same call) is copied, seq 3 is planned anew.
    copied = [turn(1), done(2, 1, "1+1")]

    plan = Planner({"calculate": calculator_spec()}).plan_turn(
        copied[0], [call(1, "1+1"), call(2, "2+2")], steps=copied, task_id="f"
    )

    repeat, other = plan.calls
    assert (repeat.seq, repeat.status) == (3, StepStatus.DEDUPLICATED)
    assert repeat.detail[DetailKey.SAME_AS_SEQ] == 2
    assert repeat.result == {"result": "1+1"}
    assert (other.seq, other.status) == (4, StepStatus.RUNNING)
    [note] = plan.notes
    # Notes follow every call of the turn, the copied ones included.
    assert note.seq == 5 and note.detail[DetailKey.ATTACH_TO] == 3


def test_a_stop_flagged_by_an_earlier_call_of_the_turn_is_kept():
    capped = done(2, 1, "1+1").copy(
        status=StepStatus.SKIPPED, error_class=ErrorClass.MAX_TOOL_CALLS
    )
    copied = [turn(1), capped]
    model_step = copied[0]
    model_step.detail[DetailKey.STOP] = "max_tool_calls"

    plan = Planner({"calculate": calculator_spec()}).plan_turn(
        model_step, [call(1, "2+2")], steps=copied, task_id="f"
    )
    plan.flag(model_step)

    assert plan.stop is StopReason.MAX_TOOL_CALLS
    assert model_step.detail[DetailKey.STOP] == "max_tool_calls"


def test_a_stale_stop_flag_is_cleared_when_the_new_plan_does_not_stop():
    model_step = turn(1)
    model_step.detail[DetailKey.STOP] = "repeated_call"

    plan = Planner({"calculate": calculator_spec()}).plan_turn(
        model_step, [call(0, "2+2")], steps=[model_step], task_id="f"
    )
    plan.flag(model_step)

    assert DetailKey.STOP not in model_step.detail


def test_the_circuit_breaker_skips_a_tool_that_failed_too_often():
    failed = [
        done(2 + n, 1, f"{n}/0").copy(
            status=StepStatus.FAILED, error_class=ErrorClass.TOOL_ERROR
        )
        for n in range(3)
    ]

    plan = Planner({"calculate": calculator_spec()}).plan_turn(
        turn(5), [call(0, "1+1")], steps=[turn(1), *failed], task_id="t"
    )

    [skipped] = plan.calls
    assert skipped.status is StepStatus.SKIPPED
    assert skipped.error_class == ErrorClass.CIRCUIT_OPEN
    assert plan.stop is None


def test_plan_call_validates_and_asks_the_policy():
    planner = Planner(
        {
            "calculate": calculator_spec(),
            "send": spec("send", approval=ApprovalMode.ALWAYS),
        }
    )

    unknown = planner.plan_call(call(0, "1", name="nope"))
    invalid = planner.plan_call(
        ToolCall(call_id="c", name="calculate", raw_arguments="{", index=0)
    )
    parked = planner.plan_call(
        ToolCall(call_id="c", name="send", raw_arguments='{"x": "a"}', index=0),
        taint=["search_notes#2"],
    )

    assert unknown.error_class == ErrorClass.UNKNOWN_TOOL
    assert "Available tools: calculate, send." in (unknown.error or "")
    assert invalid.error_class == ErrorClass.INVALID_JSON
    assert parked.status is StepStatus.WAITING_APPROVAL
    assert parked.detail[DetailKey.APPROVAL]["reasons"] == [
        "this tool always needs approval"
    ]
    assert parked.tainted_by == ["search_notes#2"]
