"""The pure re-run: recorded replies and results through the current engine."""

from __future__ import annotations

from dataclasses import replace

from engine.memory_journal import MemoryJournal
from engine.replay import RecordedRun, rerun
from engine.spec import ApprovalMode, Limits, Risk, StepStatus
from tests.support.engine_doubles import (
    FakeModel,
    calculator,
    calculator_spec,
    journal,
    make_engine,
    spec,
)
from tests.support.replies import text, tool_call, tool_calls


def recorded(j: MemoryJournal) -> RecordedRun:
    assert j.finished is not None
    return RecordedRun(
        task_id=j.task_id,
        goal=j.goal,
        system=j.system,
        model=j.model,
        steps=list(j.steps),
        stop_reason=j.finished[0].value,
    )


def a_run() -> MemoryJournal:
    model = FakeModel(
        [
            tool_call("calculate", {"expression": "128 * 6"}),
            tool_call("calculate", {"expression": "128 * 6"}),
            text("768"),
        ]
    )
    j = journal()
    make_engine(model, calculator()).advance(j)
    return j


def test_a_run_re_runs_to_the_same_steps_without_executing_anything():
    run = recorded(a_run())

    result = rerun(run, specs={"calculate": calculator_spec()}, limits=Limits())

    assert result.matches, result.divergence
    assert result.stop_reason == "final_answer"
    assert [s.status for s in result.steps] == [s.status for s in run.steps]
    assert StepStatus.DEDUPLICATED in [s.status for s in result.steps]


def test_a_stricter_policy_today_names_the_first_step_it_changes():
    run = recorded(a_run())
    stricter = replace(calculator_spec(), approval=ApprovalMode.ALWAYS)

    result = rerun(run, specs={"calculate": stricter}, limits=Limits())

    assert not result.matches
    assert result.divergence is not None and result.divergence.seq == 2
    assert result.divergence.expected["decision"] == "execute"  # type: ignore[index]
    assert result.divergence.got["decision"] == "approve"  # type: ignore[index]


def test_a_run_cancelled_between_two_writes_re_runs_to_the_same_cancel():
    """The second write was planned but never ran: the run was cancelled while
    the first one ran. Its re-run ends there too instead of running it."""
    j = journal()

    def write(arguments: dict[str, str], context: object) -> dict[str, str]:
        j.cancelled = True  # someone pressed Cancel meanwhile
        return {"written": arguments["x"]}

    writes = {"write": (spec("write", risk=Risk.WRITE), write)}
    model = FakeModel([tool_calls([("write", {"x": "a"}), ("write", {"x": "b"})])])
    make_engine(model, writes).advance(j)
    # As the database journal records a cancel: what never ran is skipped.
    run = replace(
        recorded(j),
        steps=[
            s.copy(status=StepStatus.SKIPPED, error_class="cancelled")
            if s.status is StepStatus.RUNNING
            else s
            for s in j.steps
        ],
    )
    assert run.stop_reason == "cancelled"
    assert [(s.status, s.error_class) for s in run.steps[1:]] == [
        (StepStatus.SUCCEEDED, None),
        (StepStatus.SKIPPED, "cancelled"),
    ]

    result = rerun(run, specs={"write": writes["write"][0]}, limits=Limits())

    assert result.matches, result.divergence
    assert result.stop_reason == "cancelled"
