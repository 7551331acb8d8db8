"""Outgoing webhooks: written in the request's transaction, sent after it,
signed (``X-Reach-Signature``), retried with backoff through the delivery table,
held to the SSRF rules of HTTP tools; against real receivers on loopback."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from django.utils.formats import localize

from approvals.models import ApprovalRequest
from approvals.services import approvals_expire
from audit.models import AuditEvent, AuditKind
from notify.delivery import deliveries_sweep, delivery_attempt
from notify.models import Delivery, NotifyTarget
from notify.services import NotifyError, queue_webhook, target_secret_generate
from registry.adapters import ssrf
from registry.secrets import secret_set, secret_value
from runs.models import Task
from tests.support.cast import EMAIL_PREVIEW
from tests.support.clients import bearer_client, post_decision
from tests.support.http_servers import Hit, Reply, Sequence

pytestmark = pytest.mark.django_db


def webhook(receiver: Any, **fields: Any) -> tuple[NotifyTarget, str]:
    """A webhook target POSTing to ``receiver`` (on loopback, so listed), and
    its generated signing secret."""
    target = NotifyTarget.objects.create(
        name=fields.pop("name", "ops hook"),
        kind=NotifyTarget.Kind.WEBHOOK,
        url=receiver.url("/hooks/reach"),
        allowed_hosts=["127.0.0.1"],
        **fields,
    )
    secret = target_secret_generate(target=target, by="admin")
    target.refresh_from_db()
    return target, secret


def verify(secret: str, hit: Hit) -> bool:
    """What a receiver does, written from the documented recipe."""
    parts = dict(p.split("=", 1) for p in hit.headers["x-reach-signature"].split(","))
    signed = parts["t"].encode() + b"." + hit.body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    fresh = abs(time.time() - int(parts["t"])) < 300
    return fresh and hmac.compare_digest(expected, parts["v1"])


def test_a_request_is_posted_signed_with_what_a_receiver_needs(
    local_server, email_waiting, demo, settings
):
    receiver = local_server(lambda hit: Reply(status=204))
    target, secret = webhook(receiver)
    _, [approval], _ = email_waiting()
    delivery = Delivery.objects.get(approval_id=str(approval.pk))
    assert receiver.hits == []  # queued with the request, sent after its commit

    assert delivery_attempt(delivery_id=delivery.pk) == Delivery.Status.DELIVERED

    [hit] = receiver.hits
    assert hit.path == "/hooks/reach"
    assert hit.headers["content-type"] == "application/json"
    assert hit.headers["x-reach-event"] == "approval.requested"
    assert hit.headers["x-reach-delivery"] == str(delivery.pk)
    assert verify(secret, hit)
    assert not verify("another secret", hit)
    body = hit.json()
    assert body["id"] == str(delivery.pk)
    assert body["event"] == "approval.requested"
    sent = body["approval"]
    assert sent["id"] == str(approval.pk)
    assert sent["tool"] == "send_email"
    assert sent["preview"] == EMAIL_PREVIEW
    assert sent["risk"] == approval.risk
    assert sent["reasons"] == approval.reasons
    assert sorted(sent["approvers"]) == ["admin", "operator"]
    assert sent["url"] == (
        f"{settings.REACH_PUBLIC_URL}/approvals/#approval-{approval.pk}"
    )
    assert body["outcome"] is None
    assert "arguments" not in sent  # the preview says what would run
    delivery.refresh_from_db()
    assert delivery.last_status_code == 204


def test_after_a_decision_the_outcome_is_posted(local_server, email_waiting, demo):
    receiver = local_server(lambda hit: Reply(status=200))
    webhook(receiver)
    _, [approval], _ = email_waiting()
    post_decision(
        bearer_client(demo.operator), approval, decision="reject", reason="not now"
    )

    deliveries_sweep()

    events = [hit.json() for hit in receiver.hits]
    assert [e["event"] for e in events] == ["approval.requested", "approval.decided"]
    outcome = events[1]["outcome"]
    assert outcome["status"] == "rejected"
    assert outcome["decision"] == "reject"
    assert outcome["decided_by"] == "operator"
    assert outcome["reason"] == "not now"


def test_a_target_gets_only_the_events_it_chose(local_server, email_waiting, demo):
    receiver = local_server(lambda hit: Reply(status=200))
    webhook(receiver, events=["approval.decided"])
    _, [approval], _ = email_waiting()
    post_decision(bearer_client(demo.operator), approval, decision="approve")

    deliveries_sweep()

    assert [h.headers["x-reach-event"] for h in receiver.hits] == ["approval.decided"]


def test_an_evaluations_requests_are_announced_to_nobody(
    local_server, email_waiting, demo
):
    receiver = local_server(lambda hit: Reply(status=200))
    webhook(receiver)
    task, [approval], _ = email_waiting()
    # The same request, as if an evaluation's run had opened it.
    Task.objects.filter(pk=task.pk).update(eval_case={"report": "r", "case": "c"})
    ApprovalRequest.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    assert approvals_expire() == 1

    events = Delivery.objects.filter(approval_id=str(approval.pk))
    assert list(events.values_list("event", flat=True)) == ["approval.requested"]


def test_a_receiver_that_answers_500_gets_it_again_after_a_backoff(
    local_server, email_waiting, settings
):
    receiver = local_server(
        Sequence([Reply(status=500, text="down"), Reply(status=200)])
    )
    webhook(receiver)
    _, [approval], _ = email_waiting()

    deliveries_sweep()

    delivery = Delivery.objects.get(approval_id=str(approval.pk))
    assert delivery.status == Delivery.Status.PENDING
    assert (delivery.attempts, delivery.last_status_code) == (1, 500)
    assert "HTTP 500: down" in delivery.last_error
    first = delivery.attempt_log.get()
    assert (delivery.next_attempt_at - first.at).total_seconds() == pytest.approx(
        settings.REACH_NOTIFY_BACKOFF_S, abs=1
    )
    assert deliveries_sweep() == 0  # not due yet: nothing sent
    assert len(receiver.hits) == 1

    deliveries_sweep(now=delivery.next_attempt_at + timedelta(seconds=1))

    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.DELIVERED
    assert [a.status_code for a in delivery.attempt_log.all()] == [500, 200]
    # The same delivery both times: a receiver can drop the second copy.
    assert {h.headers["x-reach-delivery"] for h in receiver.hits} == {str(delivery.pk)}


def test_the_backoff_doubles_and_a_delivery_gives_up_audited(
    local_server, email_waiting, settings
):
    settings.REACH_NOTIFY_MAX_ATTEMPTS = 3
    receiver = local_server(lambda hit: Reply(status=503))
    webhook(receiver)
    _, [approval], _ = email_waiting()
    delivery = Delivery.objects.get(approval_id=str(approval.pk))

    waits = []
    for _ in range(3):
        delivery_attempt(
            delivery_id=delivery.pk, now=timezone.now() + timedelta(days=1)
        )
        delivery.refresh_from_db()
        last = delivery.attempt_log.last()
        waits.append(round((delivery.next_attempt_at - last.at).total_seconds()))

    assert delivery.status == Delivery.Status.FAILED
    assert waits[:2] == [30, 60]
    assert len(receiver.hits) == 3
    failed = AuditEvent.objects.get(kind=AuditKind.NOTIFY_DELIVERY_FAILED)
    assert failed.object_id == str(delivery.pk)
    assert failed.data["attempts"] == 3 and failed.data["status_code"] == 503


def test_a_receiver_that_times_out_is_tried_again(
    local_server, email_waiting, settings
):
    settings.REACH_WEBHOOK_TIMEOUT_S = 0.5
    release = threading.Event()

    def slow(hit: Hit) -> Reply:
        release.wait(5)
        return Reply(status=200)

    receiver = local_server(slow)
    webhook(receiver)
    _, [approval], _ = email_waiting()
    started = time.monotonic()

    deliveries_sweep()

    assert time.monotonic() - started < 4
    release.set()
    delivery = Delivery.objects.get(approval_id=str(approval.pk))
    assert delivery.status == Delivery.Status.PENDING
    assert delivery.last_status_code is None
    assert "No answer within 0.5 s" in delivery.last_error


def test_a_private_address_is_refused_unless_the_target_lists_it(local_server, db):
    receiver = local_server(lambda hit: Reply(status=200))
    secret_set(name="HOOK", value="s3cret")

    with pytest.raises(NotifyError, match="127.0.0.1 is not in allowed_hosts"):
        queue_webhook(receiver.url("/"), "HOOK", "run.finished", {"run": 1})

    delivery = queue_webhook(
        receiver.url("/"),
        "HOOK",
        "run.finished",
        {"run": 1},
        allowed_hosts=["127.0.0.1"],
    )
    assert delivery_attempt(delivery_id=delivery.pk) == Delivery.Status.DELIVERED
    [hit] = receiver.hits
    assert hit.json()["run"] == 1 and hit.json()["event"] == "run.finished"
    assert verify("s3cret", hit)


def test_a_name_that_resolves_to_a_private_address_fails_at_once(
    local_server, monkeypatch, db
):
    receiver = local_server(lambda hit: Reply(status=200))
    secret_set(name="HOOK", value="s3cret")
    monkeypatch.setattr(ssrf, "resolve", lambda host, port: ["127.0.0.1"])
    delivery = queue_webhook(
        f"http://hooks.example:{receiver.port}/", "HOOK", "run.finished", {}
    )

    assert delivery_attempt(delivery_id=delivery.pk) == Delivery.Status.FAILED

    assert receiver.hits == []
    delivery.refresh_from_db()
    assert "hooks.example resolves to 127.0.0.1 (loopback)" in delivery.last_error
    assert AuditEvent.objects.filter(kind=AuditKind.NOTIFY_DELIVERY_FAILED).exists()


def test_a_stuck_send_goes_back_to_pending_and_is_sent(local_server, db):
    receiver = local_server(lambda hit: Reply(status=200))
    secret_set(name="HOOK", value="s3cret")
    delivery = queue_webhook(
        receiver.url("/"), "HOOK", "run.finished", {}, allowed_hosts=["127.0.0.1"]
    )
    Delivery.objects.filter(pk=delivery.pk).update(
        status=Delivery.Status.SENDING,
        claimed_at=timezone.now() - timedelta(minutes=10),
    )

    deliveries_sweep()

    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.DELIVERED
    assert len(receiver.hits) == 1


def test_the_same_key_is_queued_once(local_server, db):
    receiver = local_server(lambda hit: Reply(status=200))
    secret_set(name="HOOK", value="s3cret")
    args = (receiver.url("/"), "HOOK", "run.finished", {"run": 7})
    first = queue_webhook(*args, key="run:7", allowed_hosts=["127.0.0.1"])
    second = queue_webhook(*args, key="run:7", allowed_hosts=["127.0.0.1"])

    deliveries_sweep()

    assert first.pk == second.pk
    assert len(receiver.hits) == 1


# -- the admin ----------------------------------------------------------------------


def test_the_admin_adds_a_webhook_shows_its_secret_once_and_audits_it(
    local_server, demo
):
    receiver = local_server(lambda hit: Reply(status=200))
    client = Client()
    client.force_login(demo.admin)

    response = client.post(
        "/admin/notify/notifytarget/add/",
        {
            "name": "teams",
            "kind": "webhook",
            "enabled": "on",
            "for_all": "on",
            "events": "[]",
            "url": receiver.url("/hook"),
            "allowed_hosts": '["127.0.0.1"]',
            "secret_name": "",
        },
        follow=True,
    )

    assert response.status_code == 200
    target = NotifyTarget.objects.get(name="teams")
    assert target.secret_name == f"NOTIFY_{target.pk}"
    value = secret_value(target.secret_name)
    shown = [str(m) for m in response.context["messages"]]
    assert any(value in m and "not shown again" in m for m in shown)
    assert (
        value
        not in client.get(
            f"/admin/notify/notifytarget/{target.pk}/change/"
        ).content.decode()
    )
    changed = AuditEvent.objects.get(kind=AuditKind.NOTIFY_TARGET_CHANGED)
    assert changed.actor == "admin" and changed.data["url"] == receiver.url("/hook")
    assert AuditEvent.objects.filter(kind=AuditKind.NOTIFY_SECRET_GENERATED).exists()


def test_deleting_a_target_in_the_admin_is_audited(demo):
    target = NotifyTarget.objects.create(
        name="old", kind=NotifyTarget.Kind.SLACK_CHANNEL, slack_channel="C1"
    )
    client = Client()
    client.force_login(demo.admin)

    client.post(f"/admin/notify/notifytarget/{target.pk}/delete/", {"post": "yes"})

    assert not NotifyTarget.objects.exists()
    event = AuditEvent.objects.get(kind=AuditKind.NOTIFY_TARGET_CHANGED)
    assert event.data == {"deleted": True, "name": "old", "kind": "slack_channel"}


def test_the_admin_refuses_a_webhook_to_a_private_address_it_does_not_list(demo):
    client = Client()
    client.force_login(demo.admin)

    response = client.post(
        "/admin/notify/notifytarget/add/",
        {
            "name": "internal",
            "kind": "webhook",
            "events": "[]",
            "url": "http://10.0.0.5/hook",
            "allowed_hosts": "[]",
        },
    )

    assert response.status_code == 200
    assert "10.0.0.5 is not in allowed_hosts" in response.content.decode()
    assert not NotifyTarget.objects.exists()


def test_the_delivery_log_shows_attempts_status_codes_errors_and_next_attempt(
    local_server, email_waiting, demo
):
    receiver = local_server(lambda hit: Reply(status=500, text="boom"))
    webhook(receiver)
    email_waiting()
    deliveries_sweep()
    delivery = Delivery.objects.get()
    client = Client()
    client.force_login(demo.admin)

    listed = client.get("/admin/notify/delivery/").content.decode()
    detail = client.get(
        f"/admin/notify/delivery/{delivery.pk}/change/"
    ).content.decode()

    assert "approval.requested" in listed and "HTTP 500: boom" in listed
    assert "500" in detail and "boom" in detail
    assert localize(timezone.template_localtime(delivery.next_attempt_at)) in detail

    client.post(
        "/admin/notify/delivery/",
        {"action": "retry_now", "_selected_action": [str(delivery.pk)]},
    )
    delivery.refresh_from_db()
    assert delivery.attempts == 0 and delivery.next_attempt_at <= timezone.now()
    assert AuditEvent.objects.filter(kind=AuditKind.NOTIFY_DELIVERY_RETRIED).exists()


def test_webhook_bodies_are_compact_json_and_the_signature_covers_them_exactly(
    local_server, db
):
    receiver = local_server(lambda hit: Reply(status=200))
    secret_set(name="HOOK", value="s3cret")
    delivery = queue_webhook(
        receiver.url("/"),
        "HOOK",
        "run.finished",
        {"text": "总和 1088"},
        allowed_hosts=["127.0.0.1"],
    )
    delivery_attempt(delivery_id=delivery.pk)

    [hit] = receiver.hits
    assert json.loads(hit.body)["text"] == "总和 1088"
    tampered = Hit(
        hit.method, hit.target, hit.headers, hit.body.replace(b"1088", b"1089")
    )
    assert verify("s3cret", hit) and not verify("s3cret", tampered)
