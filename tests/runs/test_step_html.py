"""A step's list item drawn from its pushed payload is the one drawn from its row.

The worker pushes step events without HTML; a page's socket draws the item from
the payload (:func:`runs.events.with_html`). Every kind and state of step must
come out the same as the chat and trace pages draw it from the database.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from engine.spec import StepKind, StepRecord, StepStatus, utcnow
from runs import events
from runs.models import Step
from tests.support.runs import claimed, model_step

pytestmark = pytest.mark.django_db(transaction=True)


def _call(seq: int, status: StepStatus, tool: str, **fields: Any) -> StepRecord:
    """A tool call of the model step at seq 1."""
    return StepRecord(
        seq=seq,
        kind=StepKind.TOOL_CALL,
        status=status,
        tool=tool,
        call_index=seq - 2,
        parent_seq=1,
        **fields,
    )


def _steps() -> list[StepRecord]:
    started = utcnow()
    finished = started + dt.timedelta(milliseconds=1234)
    timed = {"started_at": started, "finished_at": finished}
    attempts = [
        {
            "number": 1,
            "duration_ms": 12.5,
            "error": "timed out",
            "error_class": "timeout",
        },
        {"number": 2, "duration_ms": 8.0, "error": None},
    ]
    usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    approval = {"preview": "Send mail to a@example.com", "approvals_required": 2}
    decision = {"decision": "rejected", "by": "operator", "reason": "not now"}
    compaction = {"replaced": [2, 3], "dropped_history_turns": 1, "budget": 4000}
    return [
        model_step(
            "m",
            response={"tool_calls": [{"id": "c1"}, {"id": "c2"}]},
            cost_usd=0.000123456789,
            attempts=attempts,
            **timed,
        ).copy(usage={**usage, "estimated": 1}),
        _call(
            2,
            StepStatus.SUCCEEDED,
            "calculate",
            arguments={"expression": "128 * 6 + 320"},
            result={"result": 1088},
            tainted_by=["search_notes#3"],
            **timed,
        ),
        _call(
            3,
            StepStatus.WAITING_APPROVAL,
            "send_email",
            arguments={"to": "a@example.com"},
            proposed_arguments={"to": "b@x.org"},
            error_class="outcome_unknown",
            detail={"approval": approval},
        ),
        _call(
            4,
            StepStatus.FAILED,
            "create_ticket",
            raw_arguments='{"title": ',
            error="The arguments are not JSON.",
            detail={"decision": {**decision, "edited": True}},
        ),
        StepRecord(
            seq=5,
            kind=StepKind.MODEL_CALL,
            status=StepStatus.FAILED,
            model="m",
            error="The model endpoint refused the connection.",
        ),
        StepRecord(
            seq=6,
            kind=StepKind.NOTE,
            status=StepStatus.SUCCEEDED,
            detail={"text": "Remembered: the budget"},
        ),
        StepRecord(
            seq=7,
            kind=StepKind.COMPACTION,
            status=StepStatus.SUCCEEDED,
            detail={**compaction, "estimate_before": 5000, "estimate_after": 3000},
        ),
        _call(8, StepStatus.EXPIRED, "send_email", arguments={}),
    ]


def test_every_kind_of_step_draws_the_same_from_its_payload_as_from_its_row(
    alice, demo
):
    journal = claimed(alice, demo.agent, owner="w1")
    journal.append(_steps())

    rows = list(Step.objects.filter(task_id=journal.task_id).order_by("seq"))
    assert len(rows) == 8
    for row in rows:
        pushed = events.step_event(row, redact=False, html=False)
        assert "html" not in pushed
        drawn = events.with_html(pushed)["html"]
        assert drawn == events.render_step_html(row), row.seq
        assert f'id="step-{journal.task_id}-{row.seq}"' in drawn


def test_an_event_that_has_its_html_keeps_it(alice, demo):
    journal = claimed(alice, demo.agent, owner="w1")
    [row] = journal.append([model_step("m")])
    event = events.step_event(Step.objects.get(task_id=journal.task_id, seq=row.seq))
    assert events.with_html(event) is event
