"""Suites from runs (issue 29, item 4): a recorded run becomes a case that
replays it with no write, one at a time from the trace or many from a filter."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from audit.models import AuditEvent
from effects.models import Outbox
from evals import from_runs, services
from evals.models import Suite
from feedback.services import give_feedback, label_run
from runs.models import Task
from tests.support.cast import EMAIL, QUESTION
from tests.support.replies import Script, text, tool_call
from tests.support.runs import advance, ask, decide
from tests.support.scripted_model import RedisScript

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ticket_run(alice: Any, operator: Any, demo: Any, model: Any) -> Task:
    """alice asks for a mail; the operator approves it; the run answers wrongly
    and alice gives it a thumbs down; a reviewer corrects it."""
    model(
        Script(
            [
                tool_call("send_email", EMAIL),
                text("Mail sent; the refund is 25 EUR."),
            ]
        )
    )
    task = ask(
        alice, demo.agent, "mail ops that the double charge of 40 EUR is refunded"
    )
    task = decide(task, operator, "approve")
    assert task.status == "succeeded", task.error_message
    give_feedback(user=alice, task=task, rating="down", comment="it was 40")
    label_run(
        reviewer=operator,
        task=task,
        verdict="incorrect",
        corrected_answer="Mail sent; the refund is 40 EUR.",
    )
    return task


def test_a_corrected_run_becomes_a_case_with_its_recorded_results(
    ticket_run: Task,
) -> None:
    case = from_runs.case_from_run(ticket_run)
    assert case["input"] == ["mail ops that the double charge of 40 EUR is refunded"]
    assert case["expect"] == {"answer_contains": ["40"]}  # the run was wrong: no tools
    assert case["reference"] == "Mail sent; the refund is 40 EUR."
    assert case["source"] == str(ticket_run.pk)
    assert case["approvals"] == "approve"
    assert set(case["results"]) == {"send_email"}
    assert "label incorrect" in case["notes"]


def test_the_case_replays_without_a_real_write(
    ticket_run: Task, operator: Any, demo: Any, model: Any
) -> None:
    suite, added = from_runs.suite_add_runs(
        name="mails-from-runs", tasks=[ticket_run], actor=operator
    )
    assert (added, suite.source) == (1, Suite.Source.RUNS)
    mails = Outbox.objects.count()
    model(
        Script(
            [
                tool_call("send_email", EMAIL),
                text("Mail sent; the refund is 40 EUR."),
            ]
        )
    )
    report = services.report_create(user=operator, suite=suite)
    report = services.report_drive(report, advance=advance)
    assert report.status == "done", report.error
    assert report.result["cases"][0]["success_rate"] == 1.0
    assert Outbox.objects.count() == mails  # the recorded result answered


def test_a_filter_builds_a_suite_and_a_filter_matching_nothing_is_refused(
    ticket_run: Task,
    alice: Any,
    operator: Any,
    demo: Any,
    model: Any,
    api_client_for: Any,
) -> None:
    model(RedisScript())
    good = ask(alice, demo.agent, QUESTION)
    give_feedback(user=alice, task=good, rating="up")
    client = api_client_for(operator)
    week_ago = (timezone.localdate() - dt.timedelta(days=7)).isoformat()
    made = client.post(
        "/api/evals/suites/thumbs-down/runs/",
        {"filter": {"rating": "down", "since": week_ago}},
        format="json",
    )
    assert made.status_code == 201, made.content
    assert made.json()["cases"] == [from_runs.case_id_for(ticket_run)]
    # Adding again replaces the case, never doubles it; another run joins.
    again = client.post(
        "/api/evals/suites/thumbs-down/runs/",
        {"tasks": [str(ticket_run.pk), str(good.pk)]},
        format="json",
    )
    assert again.status_code == 200
    assert sorted(again.json()["cases"]) == sorted(
        [from_runs.case_id_for(ticket_run), from_runs.case_id_for(good)]
    )
    document = Suite.objects.get(name="thumbs-down").document
    right = next(c for c in document["cases"] if c["source"] == str(good.pk))
    assert right["expect"]["tools"] == ["search_notes", "calculate"]
    assert "1088" in right["expect"]["answer_contains"]

    nothing = client.post(
        "/api/evals/suites/empty/runs/",
        {"filter": {"rating": "down", "since": "2099-01-01"}},
        format="json",
    )
    assert nothing.status_code == 404
    assert "No run matches thumbs down, since 2099-01-01" in nothing.json()["error"]
    assert not Suite.objects.filter(name="empty").exists()
    bad = client.post(
        "/api/evals/suites/x/runs/", {"filter": {"rating": "meh"}}, format="json"
    )
    assert bad.status_code == 400
    services.suites_sync_builtin()
    builtin = client.post(
        "/api/evals/suites/notes-demo/runs/", {"task": str(good.pk)}, format="json"
    )
    assert builtin.status_code == 409
    assert "read from a file" in builtin.json()["error"]
    assert AuditEvent.objects.filter(kind=from_runs.SUITE_FROM_RUNS).count() == 2


def test_others_runs_stay_hidden_and_chat_users_may_not_build_suites(
    ticket_run: Task, bob: Any, api_client_for: Any
) -> None:
    refused = api_client_for(bob).post(
        "/api/evals/suites/mine/runs/", {"task": str(ticket_run.pk)}, format="json"
    )
    assert refused.status_code == 403


def test_add_to_suite_from_the_trace_page(ticket_run: Task, operator: Any) -> None:
    page = Client()
    page.force_login(operator)
    trace = page.get(f"/traces/{ticket_run.pk}/").content.decode()
    link = f'href="/evals/from-run/{ticket_run.pk}/"'
    assert link in trace
    preview = page.get(f"/evals/from-run/{ticket_run.pk}/").content.decode()
    assert "send_email" in preview and "the refund is 40 EUR" in preview
    done = page.post(f"/evals/from-run/{ticket_run.pk}/", {"suite": "from-trace"})
    assert done.status_code == 302
    assert [
        c["source"] for c in Suite.objects.get(name="from-trace").document["cases"]
    ] == [str(ticket_run.pk)]
    bad = page.post(f"/evals/from-run/{ticket_run.pk}/", {"suite": "no spaces"})
    assert bad.status_code == 200
    assert "letters, digits" in bad.content.decode()
