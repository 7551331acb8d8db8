"""Completion webhooks: a run's outcome posted, signed with the install's secret,
to the URL its conversation names when it ends or parks for an approval; queued
in the transaction of the task's state, sent by the outbox (retries, backoff,
the delivery log), held to the SSRF rules of HTTP tools. Real runs against the
scripted model, real receivers on loopback."""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client

from audit.models import AuditEvent, AuditKind
from notify import completion
from notify import tasks as notify_tasks
from notify.delivery import deliveries_sweep, delivery_attempt
from notify.models import Delivery
from registry.adapters import ssrf
from registry.secrets import secret_value
from runs import ports
from runs import services as runs
from runs.models import Conversation, Task
from tests.support.cast import EMAIL
from tests.support.clients import bearer_client, post_message
from tests.support.http_servers import Hit, Reply, Sequence
from tests.support.replies import Script, text, tool_call
from tests.support.runs import advance, ask, decide, pending

pytestmark = pytest.mark.django_db

SECRET = completion.SECRET_NAME


@pytest.fixture
def loopback_allowed(settings: Any) -> None:
    """The deployment declares the loopback receiver internal, as it would an
    internal service for HTTP tools."""
    settings.REACH_INTERNAL_HOSTS = ["127.0.0.1"]


def verify(secret: str, hit: Hit) -> bool:
    """What a receiver does, written from the README's recipe."""
    parts = dict(p.split("=", 1) for p in hit.headers["x-reach-signature"].split(","))
    signed = parts["t"].encode() + b"." + hit.body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    fresh = abs(time.time() - int(parts["t"])) < 300
    return fresh and hmac.compare_digest(expected, parts["v1"])


def conversation_to(user: Any, url: str) -> Conversation:
    """A conversation made through the API with its webhook URL."""
    answer = bearer_client(user).post(
        "/api/conversations/", {"webhook_url": url}, format="json"
    )
    assert answer.status_code == 201, answer.content
    assert answer.json()["webhook_url"] == url
    return Conversation.objects.get(pk=answer.json()["id"])


def answered(model: Any, demo: Any, url: str, answer: str = "All 3 tickets closed."):
    """A run of alice's in a conversation posting to ``url``, finished."""
    model(Script([text(answer)]))
    conversation = conversation_to(demo.alice, url)
    task = ask(demo.alice, demo.agent, "Close the tickets", conversation)
    assert task.status == Task.Status.SUCCEEDED
    return task


def test_a_finished_run_posts_its_outcome_signed(
    local_server, model, demo, settings, loopback_allowed
):
    receiver = local_server(lambda hit: Reply(status=204))
    task = answered(model, demo, receiver.url("/reach/done"))
    delivery = Delivery.objects.get(key=f"run.finished:{task.pk}")
    # Queued with the run's end, sent after its commit (by the outbox).
    assert receiver.hits == []
    assert delivery.status == Delivery.Status.PENDING

    assert delivery_attempt(delivery_id=delivery.pk) == Delivery.Status.DELIVERED

    [hit] = receiver.hits
    assert hit.path == "/reach/done"
    assert hit.headers["x-reach-event"] == "run.finished"
    assert hit.headers["x-reach-delivery"] == str(delivery.pk)
    secret = secret_value(SECRET)
    assert secret and verify(secret, hit)
    assert not verify("another secret", hit)
    body = hit.json()
    assert body["id"] == str(delivery.pk)
    assert body["event"] == "run.finished"
    assert body["task"] == str(task.pk)
    assert body["conversation"] == str(task.conversation_id)
    assert body["status"] == "succeeded"
    assert body["answer"] == "All 3 tickets closed."
    assert body["stop_reason"] == "final_answer"
    assert body["error"] is None
    assert body["cost"]["total_tokens"] == task.total_tokens > 0
    assert body["cost"]["steps"] == task.step_count
    assert "usd" in body["cost"]
    assert body["trace_url"] == (
        settings.REACH_PUBLIC_URL.rstrip("/") + ports.trace_url()(task.pk)
    )
    assert body["finished_at"] == task.finished_at.isoformat()
    # The secret was made on first use, audited, never sent.
    assert AuditEvent.objects.filter(
        kind=AuditKind.NOTIFY_SECRET_GENERATED, object_id=SECRET
    ).exists()
    assert secret not in hit.body.decode()


# The approved send_email writes from its own thread: committed rows.
@pytest.mark.django_db(transaction=True)
def test_a_parked_run_posts_its_requests_then_its_end(
    local_server, model, demo, loopback_allowed
):
    receiver = local_server(lambda hit: Reply(status=200))
    model(Script([tool_call("send_email", EMAIL), text("Sent.")]))
    conversation = conversation_to(demo.alice, receiver.url("/hook"))
    task = ask(demo.alice, demo.agent, "Mail the report to ops", conversation)
    assert task.status == Task.Status.WAITING_APPROVAL
    [approval] = pending(task)

    deliveries_sweep()

    [hit] = receiver.hits
    assert verify(secret_value(SECRET), hit)
    parked = hit.json()
    assert parked["event"] == "run.parked" and parked["task"] == str(task.pk)
    assert parked["status"] == "waiting_approval"
    assert parked["answer"] is None and parked["stop_reason"] is None
    [waiting] = parked["approvals"]
    assert waiting["id"] == str(approval.pk) and waiting["tool"] == "send_email"
    assert waiting["url"].endswith(f"/approvals/#approval-{approval.pk}")

    task = decide(task, demo.operator, "approve")
    assert task.status == Task.Status.SUCCEEDED
    deliveries_sweep()

    assert [h.json()["event"] for h in receiver.hits] == ["run.parked", "run.finished"]
    assert receiver.hits[1].json()["answer"] == "Sent."
    assert "approvals" not in receiver.hits[1].json()


def test_a_cancelled_waiting_run_posts_its_end(
    local_server, model, demo, loopback_allowed
):
    receiver = local_server(lambda hit: Reply(status=200))
    model(Script([tool_call("send_email", EMAIL), text("Sent.")]))
    conversation = conversation_to(demo.alice, receiver.url("/hook"))
    task = ask(demo.alice, demo.agent, "Mail the report to ops", conversation)

    runs.task_cancel(task=task, user=demo.alice)
    deliveries_sweep()

    events = [h.json() for h in receiver.hits]
    assert [e["event"] for e in events] == ["run.parked", "run.finished"]
    assert events[1]["status"] == "cancelled"
    assert events[1]["stop_reason"] == "cancelled"


@pytest.mark.django_db(transaction=True)
def test_the_outbox_sends_it_once_the_finish_has_committed(
    local_server, model, demo, loopback_allowed, monkeypatch
):
    receiver = local_server(lambda hit: Reply(status=200))
    seen: list[tuple[bool, str]] = []

    def deliver_now(args: tuple[str], **_: Any) -> None:
        # What the worker that takes notify.deliver does, here.
        row = Delivery.objects.get(pk=args[0])
        seen.append((connection.in_atomic_block, row.status))
        delivery_attempt(delivery_id=args[0])

    monkeypatch.setattr(notify_tasks.deliver, "apply_async", deliver_now)

    task = answered(model, demo, receiver.url("/"))

    assert seen == [(False, Delivery.Status.PENDING)]  # after the commit
    [hit] = receiver.hits
    assert hit.json()["task"] == str(task.pk)
    assert Delivery.objects.get().status == Delivery.Status.DELIVERED


def test_a_receiver_that_answers_500_gets_it_again_after_a_backoff(
    local_server, model, demo, settings, loopback_allowed
):
    receiver = local_server(
        Sequence([Reply(status=500, text="down"), Reply(status=200)])
    )
    task = answered(model, demo, receiver.url("/"))

    deliveries_sweep()

    delivery = Delivery.objects.get(key=f"run.finished:{task.pk}")
    assert delivery.status == Delivery.Status.PENDING
    assert (delivery.attempts, delivery.last_status_code) == (1, 500)
    first = delivery.attempt_log.get()
    assert (delivery.next_attempt_at - first.at).total_seconds() == pytest.approx(
        settings.REACH_NOTIFY_BACKOFF_S, abs=1
    )
    assert deliveries_sweep() == 0  # not due yet
    assert len(receiver.hits) == 1

    deliveries_sweep(now=delivery.next_attempt_at + timedelta(seconds=1))

    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.DELIVERED
    assert [a.status_code for a in delivery.attempt_log.all()] == [500, 200]
    assert [h.json()["id"] for h in receiver.hits] == [str(delivery.pk)] * 2
    assert all(verify(secret_value(SECRET), h) for h in receiver.hits)


def test_a_receiver_that_times_out_is_tried_again_then_delivered(
    local_server, model, demo, settings, loopback_allowed
):
    settings.REACH_WEBHOOK_TIMEOUT_S = 0.5
    release = threading.Event()
    answers = iter([True, False])

    def slow_once(hit: Hit) -> Reply:
        if next(answers, False):
            release.wait(5)
        return Reply(status=200)

    receiver = local_server(slow_once)
    task = answered(model, demo, receiver.url("/"))

    deliveries_sweep()
    release.set()

    delivery = Delivery.objects.get(key=f"run.finished:{task.pk}")
    assert delivery.status == Delivery.Status.PENDING
    assert delivery.last_status_code is None
    assert "No answer within 0.5 s" in delivery.last_error
    first = delivery.attempt_log.get()
    assert (delivery.next_attempt_at - first.at).total_seconds() == pytest.approx(
        settings.REACH_NOTIFY_BACKOFF_S, abs=1
    )

    deliveries_sweep(now=delivery.next_attempt_at + timedelta(seconds=1))

    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.DELIVERED
    assert [a.status_code for a in delivery.attempt_log.all()] == [None, 200]


def test_the_same_finish_processed_twice_is_delivered_once(
    local_server, model, demo, loopback_allowed
):
    receiver = local_server(lambda hit: Reply(status=200))
    task = answered(model, demo, receiver.url("/"))
    # The finish heard again (a repeated signal, a second process).
    ports.task_outcome.send(sender=Task, task=task, parked=False)
    completion.on_task_outcome(
        sender=Task, task=Task.objects.get(pk=task.pk), parked=False
    )

    deliveries_sweep()
    deliveries_sweep(now=task.finished_at + timedelta(days=1))

    assert Delivery.objects.filter(event="run.finished").count() == 1
    assert len(receiver.hits) == 1


def test_the_webhook_is_queued_in_the_transaction_of_the_tasks_state(
    local_server, model, demo, loopback_allowed
):
    receiver = local_server(lambda hit: Reply(status=200))
    task = answered(model, demo, receiver.url("/"))
    Delivery.objects.all().delete()

    class RolledBack(Exception):
        pass

    with pytest.raises(RolledBack), transaction.atomic():
        ports.task_outcome.send(sender=Task, task=task, parked=False)
        assert Delivery.objects.count() == 1
        raise RolledBack

    assert not Delivery.objects.exists()


def test_a_run_without_a_url_queues_nothing(model, demo):
    model(Script([text("done")]))
    task = ask(demo.alice, demo.agent, "hello")

    assert task.webhook_url == ""
    assert not Delivery.objects.exists()


# -- the SSRF rule ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:9/hook", "127.0.0.1 is not in allowed_hosts"),
        ("http://10.0.0.5/hook", "10.0.0.5 is not in allowed_hosts"),
        ("http://[::1]/hook", "is not in allowed_hosts"),
        ("ftp://hooks.example/hook", "only http and https"),
        ("https://user:pw@hooks.example/", "credentials in the URL"),
        ("not a url", "no host"),
        (42, "a URL (a string)"),
        ("https://hooks.example/" + "a" * 2000, "longer than 2000 characters"),
    ],
)
def test_the_api_refuses_a_url_the_http_tools_rules_refuse(demo, url, says):
    client = bearer_client(demo.alice)

    created = client.post("/api/conversations/", {"webhook_url": url}, format="json")

    assert created.status_code == 400
    assert says in " ".join(created.json()["webhook_url"])
    assert not Conversation.objects.filter(owner=demo.alice).exists()


def test_a_private_address_is_allowed_only_when_internal_hosts_lists_it(demo, settings):
    client = bearer_client(demo.alice)
    url = "http://10.0.0.5/hook"
    conversation = client.post("/api/conversations/", {}, format="json").json()
    path = f"/api/conversations/{conversation['id']}/"

    refused = client.patch(path, {"webhook_url": url}, format="json")
    settings.REACH_INTERNAL_HOSTS = ["10.0.0.0/8"]
    allowed = client.patch(path, {"webhook_url": url}, format="json")

    assert refused.status_code == 400
    assert "10.0.0.5 is not in allowed_hosts" in refused.json()["error"]
    assert allowed.status_code == 200 and allowed.json()["webhook_url"] == url
    assert client.get(path).json()["webhook_url"] == url
    cleared = client.patch(path, {"webhook_url": None}, format="json")
    assert cleared.status_code == 200 and cleared.json()["webhook_url"] is None
    assert Conversation.objects.get(pk=conversation["id"]).webhook_url == ""


def test_a_name_that_resolves_to_a_private_address_is_refused_at_send(
    local_server, model, demo, monkeypatch
):
    receiver = local_server(lambda hit: Reply(status=200))
    monkeypatch.setattr(ssrf, "resolve", lambda host, port: ["127.0.0.1"])
    task = answered(model, demo, f"http://hooks.example:{receiver.port}/")

    deliveries_sweep()

    assert receiver.hits == []
    delivery = Delivery.objects.get(key=f"run.finished:{task.pk}")
    assert delivery.status == Delivery.Status.FAILED
    assert "hooks.example resolves to 127.0.0.1 (loopback)" in delivery.last_error
    failed = AuditEvent.objects.get(kind=AuditKind.NOTIFY_DELIVERY_FAILED)
    assert failed.object_id == str(delivery.pk)


def test_an_internal_name_reaches_its_private_address(
    local_server, model, demo, monkeypatch, settings
):
    receiver = local_server(lambda hit: Reply(status=200))
    monkeypatch.setattr(ssrf, "resolve", lambda host, port: ["127.0.0.1"])
    settings.REACH_INTERNAL_HOSTS = ["hooks.internal"]
    answered(model, demo, f"http://hooks.internal:{receiver.port}/")

    deliveries_sweep()

    [hit] = receiver.hits
    assert hit.headers["host"] == f"hooks.internal:{receiver.port}"


def test_a_url_refused_when_the_run_ends_is_a_recorded_failure_not_a_send(
    local_server, model, demo, settings
):
    receiver = local_server(lambda hit: Reply(status=200))
    settings.REACH_INTERNAL_HOSTS = ["127.0.0.1"]
    model(Script([text("done")]))
    conversation = conversation_to(demo.alice, receiver.url("/"))
    # The deployment stops declaring it internal while the URL is stored.
    settings.REACH_INTERNAL_HOSTS = []

    task = ask(demo.alice, demo.agent, "hello", conversation)
    deliveries_sweep()

    assert task.status == Task.Status.SUCCEEDED  # the run never fails for it
    assert receiver.hits == []
    delivery = Delivery.objects.get(key=f"run.finished:{task.pk}")
    assert delivery.status == Delivery.Status.FAILED
    assert "127.0.0.1 is not in allowed_hosts" in delivery.last_error
    assert delivery.payload["task"] == str(task.pk)
    assert AuditEvent.objects.filter(
        kind=AuditKind.NOTIFY_DELIVERY_FAILED, object_id=str(delivery.pk)
    ).exists()


# -- the conversation's URL and its runs --------------------------------------------


# The approved send_email writes from its own thread: committed rows.
@pytest.mark.django_db(transaction=True)
def test_a_url_set_while_a_run_waits_reaches_that_run(
    local_server, model, demo, loopback_allowed
):
    receiver = local_server(lambda hit: Reply(status=200))
    model(Script([tool_call("send_email", EMAIL), text("Sent.")]))
    client = bearer_client(demo.alice)
    conversation = client.post("/api/conversations/", {}, format="json").json()
    queued = post_message(client, conversation["id"], "Mail the report to ops")
    task = advance(Task.objects.get(pk=queued.json()["task"]))
    assert task.status == Task.Status.WAITING_APPROVAL and not Delivery.objects.exists()

    client.patch(
        f"/api/conversations/{conversation['id']}/",
        {"webhook_url": receiver.url("/late")},
        format="json",
    )
    decide(task, demo.operator, "approve")
    deliveries_sweep()

    [hit] = receiver.hits
    assert hit.path == "/late" and hit.json()["event"] == "run.finished"


# -- the secret in the admin ----------------------------------------------------------


def test_the_admin_shows_the_secret_and_rotates_it(
    local_server, model, demo, loopback_allowed
):
    receiver = local_server(lambda hit: Reply(status=200))
    client = Client()
    client.force_login(demo.admin)

    listed = client.get("/admin/notify/delivery/").content.decode()
    shown = client.get("/admin/notify/delivery/completion-secret/")

    assert "/admin/notify/delivery/completion-secret/" in listed
    assert shown.status_code == 200
    first = secret_value(SECRET)
    assert first and first in shown.content.decode()

    client.post("/admin/notify/delivery/completion-secret/", {"rotate": "1"})

    second = secret_value(SECRET)
    assert second and second != first
    assert (
        second
        in client.get("/admin/notify/delivery/completion-secret/").content.decode()
    )
    answered(model, demo, receiver.url("/"))
    deliveries_sweep()
    [hit] = receiver.hits
    assert verify(second, hit) and not verify(first, hit)
    assert (
        AuditEvent.objects.filter(
            kind=AuditKind.NOTIFY_SECRET_GENERATED, actor="admin"
        ).count()
        == 2
    )


def test_the_secret_is_not_shown_to_who_may_not_configure_webhooks(demo):
    demo.alice.is_staff = True
    demo.alice.save()
    client = Client()
    client.force_login(demo.alice)

    assert client.get("/admin/notify/delivery/completion-secret/").status_code == 403
    assert secret_value(SECRET) is None
