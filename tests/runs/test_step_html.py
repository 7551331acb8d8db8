"""A step's list item drawn from its pushed payload is the one drawn from its row.

The worker pushes step events without HTML; a page's socket draws the item from
the payload (:func:`runs.events.with_html`). Every kind and state of step must
come out the same as the chat and trace pages draw it from the database.
"""

from __future__ import annotations

import datetime as dt

import pytest

from engine.spec import StepKind, StepRecord, StepStatus, utcnow
from runs import events
from runs.models import Step
from tests.support.runs import claimed, model_step

pytestmark = pytest.mark.django_db(transaction=True)


def _steps() -> list[StepRecord]:
    started = utcnow()
    finished = started + dt.timedelta(milliseconds=1234)
    calls = {"tool_calls": [{"id": "c1"}, {"id": "c2"}]}
    return [
        model_step(
            "m",
            response=calls,
            started_at=started,
            finished_at=finished,
            cost_usd=0.000123456789,
            attempts=[
                {
                    "number": 1,
                    "duration_ms": 12.5,
                    "error": "timed out",
                    "error_class": "timeout",
                },
                {"number": 2, "duration_ms": 8.0, "error": None},
            ],
        ).copy(
            usage={
                "prompt_tokens": 7,
                "completion_tokens": 3,
                "total_tokens": 10,
                "estimated": 1,
            }
        ),
        StepRecord(
            seq=2,
            kind=StepKind.TOOL_CALL,
            status=StepStatus.SUCCEEDED,
            tool="calculate",
            call_index=0,
            parent_seq=1,
            arguments={"expression": "128 * 6 + 320"},
            result={"result": 1088},
            started_at=started,
            finished_at=finished,
            tainted_by=["search_notes#3"],
        ),
        StepRecord(
            seq=3,
            kind=StepKind.TOOL_CALL,
            status=StepStatus.WAITING_APPROVAL,
            tool="send_email",
            call_index=1,
            parent_seq=1,
            arguments={"to": "a@example.com"},
            proposed_arguments={"to": "b@x.org"},
            error_class="outcome_unknown",
            detail={
                "approval": {
                    "preview": "Send mail to a@example.com",
                    "approvals_required": 2,
                }
            },
        ),
        StepRecord(
            seq=4,
            kind=StepKind.TOOL_CALL,
            status=StepStatus.FAILED,
            tool="create_ticket",
            call_index=2,
            parent_seq=1,
            raw_arguments='{"title": ',
            error="The arguments are not JSON.",
            detail={
                "decision": {
                    "decision": "rejected",
                    "by": "operator",
                    "reason": "not now",
                    "edited": True,
                }
            },
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
            detail={
                "replaced": [2, 3],
                "dropped_history_turns": 1,
                "estimate_before": 5000,
                "estimate_after": 3000,
                "budget": 4000,
            },
        ),
        StepRecord(
            seq=8,
            kind=StepKind.TOOL_CALL,
            status=StepStatus.EXPIRED,
            tool="send_email",
            call_index=0,
            parent_seq=1,
            arguments={},
        ),
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
