"""Feedback on answers and the review queue, through the API and the pages, on
the real database (runs driven in-process against the scripted model)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from audit.models import AuditEvent
from feedback.models import Feedback, FeedbackAuditKind, ReviewLabel
from runs.models import Task
from tests.support.replies import Script, text
from tests.support.runs import ask, start

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def answered(alice: Any, demo: Any, model: Any) -> Task:
    model(Script([text("The budget is 1088.")]))
    task = ask(alice, demo.agent, "what is the budget?")
    assert task.status == "succeeded", task.error_message
    return task


def _kinds() -> list[str]:
    return list(AuditEvent.objects.values_list("kind", flat=True))


def test_the_owner_rates_an_answer_and_changes_the_rating(
    answered: Task, alice: Any, api_client_for: Any
) -> None:
    client = api_client_for(alice)
    url = f"/api/tasks/{answered.pk}/feedback/"
    first = client.post(
        url, {"rating": "down", "comment": "wrong total"}, format="json"
    )
    assert first.status_code == 201, first.content
    assert first.json()["rating"] == "down"
    assert first.json()["comment"] == "wrong total"
    again = client.post(url, {"rating": "up"}, format="json")
    assert again.status_code == 200
    row = Feedback.objects.get(task=answered)
    assert (row.rating, row.comment) == ("up", "")
    assert client.get(url).json()["feedback"][0]["rating"] == "up"
    assert _kinds().count(FeedbackAuditKind.GIVEN) == 1
    assert _kinds().count(FeedbackAuditKind.CHANGED) == 1
    assert client.delete(url).status_code == 204
    assert not Feedback.objects.filter(task=answered).exists()
    assert FeedbackAuditKind.WITHDRAWN in _kinds()
    assert client.delete(url).status_code == 404


def test_feedback_refusals_are_clear(
    answered: Task, alice: Any, bob: Any, operator: Any, demo: Any, api_client_for: Any
) -> None:
    url = f"/api/tasks/{answered.pk}/feedback/"
    # Someone else's run is not there at all.
    assert (
        api_client_for(bob).post(url, {"rating": "up"}, format="json").status_code
        == 404
    )
    # An auditor reads it but may not rate an answer written for alice.
    refused = api_client_for(operator).post(url, {"rating": "up"}, format="json")
    assert refused.status_code == 403
    assert "written for" in refused.json()["error"]
    bad = api_client_for(alice).post(url, {"rating": "meh"}, format="json")
    assert bad.status_code == 400
    assert "rating" in bad.json()
    long = api_client_for(alice).post(
        url, {"rating": "up", "comment": "x" * 2001}, format="json"
    )
    assert long.status_code == 400
    assert "2000" in long.json()["error"]
    running = start(alice, demo.agent, "still going")
    busy = api_client_for(alice).post(
        f"/api/tasks/{running.pk}/feedback/", {"rating": "up"}, format="json"
    )
    assert busy.status_code == 409
    assert "not finished" in busy.json()["error"]
    assert not Feedback.objects.exists()


def test_the_chat_reads_the_users_feedback_of_one_conversation(
    answered: Task, alice: Any, bob: Any, api_client_for: Any
) -> None:
    api_client_for(alice).post(
        f"/api/tasks/{answered.pk}/feedback/", {"rating": "down"}, format="json"
    )
    url = f"/api/feedback/?conversation={answered.conversation_id}"
    rows = api_client_for(alice).get(url).json()["feedback"]
    assert [(r["task"], r["rating"]) for r in rows] == [(str(answered.pk), "down")]
    assert api_client_for(bob).get(url).status_code == 404
    assert api_client_for(alice).get("/api/feedback/").status_code == 400
    bad = api_client_for(alice).get("/api/feedback/?conversation=null")
    assert bad.status_code == 400
    assert "UUID" in bad.json()["error"]


def _reviewer(user: Any) -> Any:
    user.user_permissions.add(
        Permission.objects.get(
            codename="review_runs", content_type__app_label="feedback"
        )
    )
    return type(user).objects.get(pk=user.pk)


def test_the_review_queue_puts_thumbs_downs_first_and_labels_them(
    answered: Task, alice: Any, bob: Any, demo: Any, model: Any, api_client_for: Any
) -> None:
    model(Script([text("Another answer.")]))
    other = ask(alice, demo.agent, "a second question")
    api_client_for(alice).post(
        f"/api/tasks/{answered.pk}/feedback/", {"rating": "down"}, format="json"
    )
    assert api_client_for(bob).get("/api/review/queue/").status_code == 403
    reviewer = api_client_for(_reviewer(bob))
    queue = reviewer.get("/api/review/queue/").json()
    assert queue[0]["task"] == str(answered.pk)
    assert queue[0]["reason"] == "thumbs down"
    assert str(other.pk) not in {q["task"] for q in queue if q["reason"] != "sample"}

    labelled = reviewer.post(
        f"/api/tasks/{answered.pk}/label/",
        {
            "verdict": "incorrect",
            "corrected_answer": "It is 1,088 USD.",
            "notes": "units",
        },
        format="json",
    )
    assert labelled.status_code == 200, labelled.content
    assert labelled.json()["verdict"] == "incorrect"
    label = ReviewLabel.objects.get(task=answered)
    assert label.corrected_answer == "It is 1,088 USD."
    assert label.goal == "what is the budget?"
    assert str(answered.pk) not in {
        q["task"] for q in reviewer.get("/api/review/queue/").json()
    }
    assert FeedbackAuditKind.LABELLED in _kinds()
    bad = reviewer.post(
        f"/api/tasks/{answered.pk}/label/", {"verdict": "maybe"}, format="json"
    )
    assert bad.status_code == 400
    listed = reviewer.get("/api/review/labels/").json()
    assert [(r["task"], r["verdict"], r["purged"]) for r in listed] == [
        (str(answered.pk), "incorrect", False)
    ]


def test_a_label_outlives_its_purged_run_and_cannot_change(
    answered: Task, bob: Any, api_client_for: Any
) -> None:
    reviewer = api_client_for(_reviewer(bob))
    reviewer.post(
        f"/api/tasks/{answered.pk}/label/", {"verdict": "correct"}, format="json"
    )
    task_id = answered.pk
    Task.objects.filter(pk=task_id).delete()  # what trace retention does
    label = ReviewLabel.objects.get(task_ref=task_id)
    assert label.task_id is None
    assert label.answer == "The budget is 1088."
    again = reviewer.post(
        f"/api/tasks/{task_id}/label/", {"verdict": "incorrect"}, format="json"
    )
    assert again.status_code == 404
    assert "purged" in again.json()["error"]
    listed = reviewer.get("/api/review/labels/").json()
    assert listed[0]["purged"] is True
    assert ReviewLabel.objects.get(task_ref=task_id).verdict == "correct"


def test_the_review_page_labels_and_exports(
    answered: Task, alice: Any, operator: Any, demo: Any, api_client_for: Any
) -> None:
    api_client_for(alice).post(
        f"/api/tasks/{answered.pk}/feedback/",
        {"rating": "down", "comment": "no"},
        format="json",
    )
    page = Client()
    page.force_login(alice)
    assert page.get("/review/").status_code == 404  # not a reviewer
    page.force_login(operator)  # the demo's operator is in the reviewers group
    html = page.get("/review/").content.decode()
    assert "thumbs down" in html
    assert "what is the budget?" in html
    response = page.post(
        f"/review/{answered.pk}/label/",
        {"verdict": "incorrect", "corrected_answer": "1,088 USD", "notes": ""},
    )
    assert response.status_code == 302
    assert ReviewLabel.objects.get(task=answered).reviewer == operator
    export = page.get("/review/labels.jsonl")
    lines = [
        json.loads(line) for line in b"".join(export.streaming_content).splitlines()
    ]
    assert [(r["task"], r["verdict"], r["corrected_answer"]) for r in lines] == [
        (str(answered.pk), "incorrect", "1,088 USD")
    ]
    assert FeedbackAuditKind.EXPORTED in _kinds()
    # The trace shows both; the stats page counts them per agent.
    trace = page.get(f"/traces/{answered.pk}/").content.decode()
    assert 'data-testid="feedback"' in trace and "not helpful" in trace
    assert 'data-testid="review-label"' in trace and "1,088 USD" in trace
    stats = page.get("/traces/stats/").content.decode()
    row = stats.split('data-testid="feedback-stats"')[1].split("</table>")[0]
    assert "<td>assistant</td><td>0</td><td>1</td><td>1</td>" in row


def test_limit_stops_and_a_sample_fill_the_queue(
    answered: Task, bob: Any, settings: Any, api_client_for: Any
) -> None:
    Task.objects.filter(pk=answered.pk).update(
        status="stopped", stop_reason="max_steps"
    )
    reviewer = api_client_for(_reviewer(bob))
    queue = reviewer.get("/api/review/queue/").json()
    assert [(q["task"], q["reason"]) for q in queue] == [
        (str(answered.pk), "stopped on a limit (max_steps)")
    ]
    Task.objects.filter(pk=answered.pk).update(
        status="succeeded", stop_reason="final_answer"
    )
    settings.REACH_REVIEW_SAMPLE_RATE = 0.0
    assert reviewer.get("/api/review/queue/").json() == []
    settings.REACH_REVIEW_SAMPLE_RATE = 1.0
    assert [q["reason"] for q in reviewer.get("/api/review/queue/").json()] == [
        "sample"
    ]
