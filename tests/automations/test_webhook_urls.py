"""A schedule's and a trigger's completion webhook: their runs' conversations
carry the URL, so each run's outcome is posted there (notify's completion
webhooks); the admin and the schedules page refuse a URL the SSRF rule refuses."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from automations import services
from automations.models import Schedule, Trigger
from automations.signing import sign
from notify.completion import SECRET_NAME
from notify.delivery import deliveries_sweep
from registry.secrets import secret_value
from runs.models import Task
from tests.support.clients import logged_in
from tests.support.http_servers import Reply
from tests.support.replies import Script, text
from tests.support.runs import advance

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("flush_redis")]

T0 = datetime(2026, 3, 27, 8, 0, tzinfo=UTC)


@pytest.fixture
def receiver(local_server: Any, settings: Any) -> Any:
    """A receiver on loopback, which the deployment declares internal."""
    settings.REACH_INTERNAL_HOSTS = ["127.0.0.1"]
    return local_server(lambda hit: Reply(status=200))


def test_a_schedules_runs_post_their_outcome_to_its_url(receiver, model, alice, demo):
    model(Script([text("Digest: nothing new.")]))
    url = receiver.url("/digest")
    schedule = Schedule(
        name="hourly digest",
        owner=alice,
        agent=demo.agent,
        message="Summarise the new tickets.",
        cron="0 * * * *",
        webhook_url=url,
        created_at=T0,
    )
    services.schedule_check(schedule, now=T0)
    schedule.next_due_at = schedule.cadence().next_after(T0)
    schedule.save()

    [task] = services.schedules_tick(now=T0 + timedelta(hours=1, seconds=3))
    assert task.conversation.webhook_url == url and task.webhook_url == url
    advance(task)
    deliveries_sweep()

    [hit] = receiver.hits
    body = hit.json()
    assert hit.path == "/digest" and body["event"] == "run.finished"
    assert body["task"] == str(task.pk) and body["source"] == schedule.source
    assert body["answer"] == "Digest: nothing new."
    assert hit.headers["x-reach-signature"].startswith("t=")
    assert secret_value(SECRET_NAME)

    # Run now carries it too.
    again = services.schedule_run_now(schedule=schedule, user=alice)
    assert again.webhook_url == url


def test_a_triggers_runs_post_their_outcome_to_its_url(
    receiver, model, alice, operator, demo
):
    model(Script([text("Ticket filed.")]))
    url = receiver.url("/tickets")
    trigger, secret = services.trigger_create(
        name="support inbox",
        owner=alice,
        agent=demo.agent,
        template="New ticket: {subject}",
        user=operator,
        webhook_url=url,
    )
    body = json.dumps({"subject": "refund"}).encode()

    answer = APIClient().generic(
        "POST",
        f"/api/triggers/{trigger.pk}/",
        body,
        content_type="application/json",
        HTTP_X_REACH_SIGNATURE=sign(secret, body, int(time.time())),
    )

    assert answer.status_code == 202, answer.content
    task = Task.objects.get(pk=answer.json()["task"])
    assert task.conversation.webhook_url == url and task.webhook_url == url
    advance(task)
    deliveries_sweep()
    [hit] = receiver.hits
    assert hit.path == "/tickets"
    assert hit.json()["source"] == trigger.source
    assert hit.json()["answer"] == "Ticket filed."


def test_a_trigger_without_a_url_posts_nothing(model, alice, operator, demo):
    trigger, _ = services.trigger_create(
        name="quiet",
        owner=alice,
        agent=demo.agent,
        template="hi {x}",
        user=operator,
    )
    task = services.trigger_fire(trigger=trigger, body={"x": 1})
    assert task.webhook_url == "" and task.conversation.webhook_url == ""


def test_saving_refuses_a_private_url(alice, operator, demo):
    with pytest.raises(services.WebhookUrlInvalid, match="10.0.0.5 is not in"):
        services.trigger_create(
            name="internal",
            owner=alice,
            agent=demo.agent,
            template="hi",
            user=operator,
            webhook_url="http://10.0.0.5/hook",
        )
    assert not Trigger.objects.filter(name="internal").exists()


def test_the_admin_forms_refuse_a_private_url_and_keep_a_public_one(demo):
    client = logged_in(demo.admin)
    form = {
        "name": "nightly",
        "owner": demo.alice.pk,
        "agent": demo.agent.pk,
        "message": "Report.",
        "cron": "0 2 * * *",
        "time_zone": "UTC",
        "missed": "skip",
    }

    refused = client.post(
        "/admin/automations/schedule/add/",
        {**form, "webhook_url": "http://127.0.0.1:8000/hook"},
    )
    kept = client.post(
        "/admin/automations/schedule/add/",
        {**form, "webhook_url": "https://hooks.example.com/reach"},
    )
    trigger = client.post(
        "/admin/automations/trigger/add/",
        {
            "name": "inbox",
            "owner": demo.alice.pk,
            "agent": demo.agent.pk,
            "template": "hi",
            "rate_per_min": 10,
            "enabled": "on",
            "webhook_url": "http://192.168.1.2/hook",
        },
    )

    assert refused.status_code == 200
    assert "127.0.0.1 is not in allowed_hosts" in refused.content.decode()
    assert kept.status_code == 302
    assert Schedule.objects.get(name="nightly").webhook_url == (
        "https://hooks.example.com/reach"
    )
    assert trigger.status_code == 200
    assert "192.168.1.2 is not in allowed_hosts" in trigger.content.decode()
    assert not Trigger.objects.filter(name="inbox").exists()


def test_the_schedules_page_takes_a_webhook_url(alice, demo):
    client = logged_in(alice)
    form = {
        "name": "weekly",
        "agent": demo.agent.pk,
        "message": "Report.",
        "cron": "0 9 * * 1",
        "time_zone": "UTC",
        "missed": "skip",
    }

    refused = client.post("/schedules/", {**form, "webhook_url": "ftp://x.example/"})
    saved = client.post(
        "/schedules/", {**form, "webhook_url": "https://hooks.example.com/w"}
    )

    assert refused.status_code == 200
    assert "only http and https" in refused.content.decode()
    assert saved.status_code == 302
    assert Schedule.objects.get(name="weekly").webhook_url == (
        "https://hooks.example.com/w"
    )
