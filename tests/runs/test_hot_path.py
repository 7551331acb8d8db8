"""The per-step hot path: few queries, and pushes that carry what was written."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from engine.journal import LeaseLost
from engine.spec import StepKind, StepRecord, StepStatus, utcnow
from runs import events as notify
from runs import leases as run_leases
from runs.models import Step, Task
from runs.payloads import task_payload
from tests.support.runs import claimed, model_step, start

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.dbsensitive]


def tool_step(seq: int, status: StepStatus) -> StepRecord:
    return StepRecord(
        seq=seq,
        kind=StepKind.TOOL_CALL,
        status=status,
        tool="calculate",
        call_index=0,
        parent_seq=1,
        arguments={"expression": "1+1"},
        started_at=utcnow(),
    )


def test_a_step_update_is_one_fenced_bump_returning_the_rev_and_one_write(alice, demo):
    journal = claimed(alice, demo.agent, owner="w1")
    [step] = journal.append([tool_step(2, StepStatus.RUNNING)])

    with CaptureQueriesContext(connection) as queries:
        updated = journal.update(step.copy(status=StepStatus.SUCCEEDED, result=2))

    sql = [q["sql"].split(" ")[0] for q in queries.captured_queries]
    assert sql == ["BEGIN", "UPDATE", "UPDATE", "COMMIT"]
    assert "RETURNING" in queries.captured_queries[1]["sql"]
    assert updated.status is StepStatus.SUCCEEDED and updated.rev > step.rev
    stored = Task.objects.get(pk=journal.task_id).steps.get(seq=2)
    assert (stored.status, stored.result, stored.rev) == ("succeeded", 2, updated.rev)


def test_appending_steps_neither_counts_nor_reads_them_back(alice, demo):
    journal = claimed(alice, demo.agent, owner="w1")
    with CaptureQueriesContext(connection) as queries:
        journal.append(
            [tool_step(2, StepStatus.RUNNING), tool_step(3, StepStatus.RUNNING)]
        )

    sql = [q["sql"].split(" ")[0] for q in queries.captured_queries]
    # The fenced bump of the task's counters (returning them), one insert.
    assert sql == ["BEGIN", "UPDATE", "INSERT", "COMMIT"]
    task = Task.objects.get(pk=journal.task_id)
    assert task.step_count == 2
    assert [s.rev for s in task.steps.order_by("seq")] == [task.rev - 1, task.rev]


def test_the_task_event_reads_only_its_columns_and_matches_the_full_payload(
    alice, demo
):
    journal = claimed(alice, demo.agent, owner="w1")
    full = task_payload(
        Task.objects.select_related("agent", "owner").get(pk=journal.task_id)
    )
    from infra.runtime import redactor

    redactor().text("x")  # let its periodic secret refresh happen outside
    with CaptureQueriesContext(connection) as queries:
        event = notify.load_task_event(journal.task_id)
    assert len(queries.captured_queries) == 1
    assert event is not None and event["task"] == full


def test_a_run_pushes_each_write_with_its_events_after_commit(alice, demo, monkeypatch):
    journal = claimed(alice, demo.agent, owner="w1")
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        notify, "push", lambda group, message: sent.append((group, message))
    )
    claimed_rev = Task.objects.get(pk=journal.task_id).rev
    [step] = journal.append([tool_step(2, StepStatus.RUNNING)])
    done = journal.update(step.copy(status=StepStatus.SUCCEEDED, result=2))

    group = f"task_{journal.task_id}"
    assert [g for g, _ in sent] == [group, group]
    first, second = (message for _, message in sent)
    # Each message covers (base, rev]: the next one starts where it ended.
    assert (first["base"], first["rev"]) == (claimed_rev, step.rev)
    assert (second["base"], second["rev"]) == (step.rev, done.rev)
    assert [e["step"]["status"] for e in first["steps"]] == ["running"]
    assert [e["step"]["rev"] for e in second["steps"]] == [done.rev]
    assert second["steps"][0]["step"]["result"] == 2
    # The worker draws no HTML; a page's socket draws it from the payload, the
    # same as from the row.
    assert "html" not in second["steps"][0]
    drawn = notify.with_html(second["steps"][0])["html"]
    assert f'data-rev="{done.rev}"' in drawn
    row = Step.objects.get(task_id=journal.task_id, seq=done.seq)
    assert drawn == notify.render_step_html(row)
    # A tool step changes no task field a watcher shows; no task event.
    assert first["task"] is None and second["task"] is None


def test_a_model_step_and_the_finish_push_the_task_as_stored(alice, demo, monkeypatch):
    from engine.spec import StopReason

    journal = claimed(alice, demo.agent, owner="w1")
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(notify, "push", lambda group, message: sent.append(message))
    model = model_step("m")
    journal.append([model])
    journal.finish(StopReason.FINAL_ANSWER, answer="done", message=None)

    stored = task_payload(
        Task.objects.select_related("agent", "owner").get(pk=journal.task_id)
    )
    pushed_after_model = sent[0]["task"]["task"]
    assert pushed_after_model["usage"]["total_tokens"] == 10
    assert pushed_after_model["steps"] == 1
    assert sent[-1]["steps"] == [] and sent[-1]["rev"] == stored["rev"]
    assert sent[-1]["task"]["task"] == stored


def test_nothing_is_pushed_for_a_write_that_rolls_back(alice, demo, monkeypatch):
    from django.db import transaction

    journal = claimed(alice, demo.agent, owner="w1")
    sent: list[Any] = []
    monkeypatch.setattr(notify, "push", lambda group, message: sent.append(message))
    with pytest.raises(RuntimeError), transaction.atomic():
        journal.append([tool_step(2, StepStatus.RUNNING)])
        raise RuntimeError("roll back")
    assert sent == []


def test_a_step_update_by_a_worker_that_lost_its_lease_writes_nothing(alice, demo):
    journal = claimed(alice, demo.agent, owner="w1")
    [step] = journal.append([tool_step(2, StepStatus.RUNNING)])
    Task.objects.filter(pk=journal.task_id).update(lease_epoch=journal.epoch + 1)

    with pytest.raises(LeaseLost):
        journal.update(step.copy(status=StepStatus.SUCCEEDED, result=2))

    stored = Task.objects.get(pk=journal.task_id).steps.get(seq=2)
    assert (stored.status, stored.result, stored.rev) == ("running", None, step.rev)


def test_control_reports_a_cancel_and_fences_out_a_stale_worker(alice, demo):
    journal = claimed(alice, demo.agent, owner="w1")
    assert journal.control().cancelled is False
    Task.objects.filter(pk=journal.task_id).update(cancel_requested=True)
    assert journal.control().cancelled is True
    Task.objects.filter(pk=journal.task_id).update(lease_owner="w2")
    with pytest.raises(LeaseLost):
        journal.control()


def test_an_untrusted_result_taints_the_task_through_the_fast_update(alice, demo):
    journal = claimed(alice, demo.agent, owner="w1")
    [step] = journal.append([tool_step(2, StepStatus.RUNNING)])
    journal.update(
        step.copy(status=StepStatus.SUCCEEDED, result=[], detail={"untrusted": True})
    )
    label = f"calculate#2@{str(journal.task_id)[:8]}"
    assert Task.objects.get(pk=journal.task_id).tainted_by == [label]


def test_the_write_that_taints_the_task_pushes_the_tainted_task(
    alice, demo, monkeypatch
):
    journal = claimed(alice, demo.agent, owner="w1")
    [step] = journal.append([tool_step(2, StepStatus.RUNNING)])
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(notify, "push", lambda group, message: sent.append(message))
    done = step.copy(status=StepStatus.SUCCEEDED, result=[], detail={"untrusted": True})
    journal.update(done)
    journal.update(done)  # the same label again: the task did not change
    label = f"calculate#2@{str(journal.task_id)[:8]}"
    first, again = sent
    assert first["task"]["task"]["tainted_by"] == [label]
    assert first["task"]["task"]["rev"] == first["rev"]
    assert again["task"] is None


def test_a_taint_by_a_worker_that_lost_its_lease_is_not_written(alice, demo):
    journal = claimed(alice, demo.agent, owner="w1")
    [step] = journal.append([tool_step(2, StepStatus.RUNNING)])
    Task.objects.filter(pk=journal.task_id).update(lease_epoch=journal.epoch + 1)
    done = step.copy(status=StepStatus.SUCCEEDED, result=[], detail={"untrusted": True})
    with pytest.raises(LeaseLost):
        journal.update(done)
    assert Task.objects.get(pk=journal.task_id).tainted_by == []


def test_a_control_check_just_after_a_write_reads_nothing_and_sees_its_cancel(
    alice, demo, monkeypatch
):
    journal = claimed(alice, demo.agent, owner="w1")
    [step] = journal.append([tool_step(2, StepStatus.RUNNING)])
    with CaptureQueriesContext(connection) as queries:
        assert journal.control().cancelled is False
    assert queries.captured_queries == []

    # A cancel that commits before the next write: that write's fenced UPDATE
    # returns the flag, and the check after it answers from it.
    Task.objects.filter(pk=journal.task_id).update(cancel_requested=True)
    journal.update(step.copy(status=StepStatus.SUCCEEDED, result=2))
    with CaptureQueriesContext(connection) as queries:
        assert journal.control().cancelled is True
    assert queries.captured_queries == []

    # Later than CONTROL_FRESH_S after the write, the check reads the row again.
    from runs import journal as run_journal

    monkeypatch.setattr(run_journal, "CONTROL_FRESH_S", 0.0)
    Task.objects.filter(pk=journal.task_id).update(lease_owner="w2")
    with pytest.raises(LeaseLost):
        journal.control()


def test_an_appended_step_stores_every_field_of_its_record(alice, demo):
    journal = claimed(alice, demo.agent, owner="w1")
    record = StepRecord(
        seq=2,
        kind=StepKind.TOOL_CALL,
        status=StepStatus.WAITING_APPROVAL,
        tool="calculate",
        tool_version=3,
        call_id="call_1",
        call_index=1,
        parent_seq=1,
        arguments={"expression": "1+1"},
        raw_arguments='{"expression": "1+1"}',
        proposed_arguments={"expression": "1 + 1"},
        error="e",
        error_class="timeout",
        attempts=[{"n": 1}],
        model="m",
        request_id="r",
        usage={"total_tokens": 1},
        idempotency_key="k",
        tainted_by=["t"],
        detail={"why": "x"},
        started_at=utcnow(),
        finished_at=utcnow(),
        cost_usd=0.5,
    )
    [written] = journal.append([record])

    row = Step.objects.get(task_id=journal.task_id, seq=2)
    assert row.pk == journal._step_pk(2)
    stored = row.record()
    assert written == stored
    for name in Step.RECORD_FIELDS:
        assert getattr(stored, name) == getattr(record, name), name


def test_claiming_a_queued_task_is_one_update_that_returns_its_epoch(alice, demo):
    task = start(alice, demo.agent, "hi")
    rev = task.rev
    with CaptureQueriesContext(connection) as queries:
        epoch = run_leases.task_claim(task_id=task.pk, owner="w1")

    assert [q["sql"].split(" ")[0] for q in queries.captured_queries] == ["UPDATE"]
    row = Task.objects.get(pk=task.pk)
    assert (row.status, row.lease_owner, row.lease_epoch) == ("running", "w1", epoch)
    assert row.rev == rev + 1
    assert row.started_at is not None and row.lease_expires_at > row.started_at
    # Held and not expired: nobody else claims it.
    assert run_leases.task_claim(task_id=task.pk, owner="w2") is None
