"""The deliveries on the real stack: a Celery worker process sends a webhook
once the transaction that queued it commits, and the beat's sweep task (by the
name the schedule sends) sends one whose enqueue was lost."""

from __future__ import annotations

import pytest
from django.db import transaction

from notify.models import Delivery
from notify.services import queue_webhook
from reach_site.celery import app
from registry.secrets import secret_set
from tests.support.http_servers import Reply
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.integration]


def test_the_worker_sends_a_webhook_after_its_commit(stack, local_server):
    receiver = local_server(lambda hit: Reply(status=200))
    secret_set(name="HOOK", value="s3cret")
    worker = stack.start_worker(concurrency=2)

    with transaction.atomic():
        delivery = queue_webhook(
            receiver.url("/hook"),
            "HOOK",
            "run.finished",
            {"run": 1},
            allowed_hosts=["127.0.0.1"],
        )
        assert receiver.hits == []

    wait_for(lambda: receiver.hits, what="the worker's POST", detail=worker.tail)
    wait_for(
        lambda: (
            Delivery.objects.get(pk=delivery.pk).status == Delivery.Status.DELIVERED
        ),
        what="the delivery recorded as delivered",
        detail=worker.tail,
    )
    assert receiver.hits[0].headers["x-reach-delivery"] == str(delivery.pk)


def test_the_sweep_sends_a_delivery_whose_enqueue_was_lost(stack, local_server):
    receiver = local_server(lambda hit: Reply(status=200))
    secret_set(name="HOOK", value="s3cret")
    # Written without its on-commit enqueue, as when Redis blinked then.
    delivery = Delivery.objects.create(
        key="lost:1",
        channel=Delivery.Channel.WEBHOOK,
        event="run.finished",
        url=receiver.url("/hook"),
        allowed_hosts=["127.0.0.1"],
        secret_name="HOOK",
        payload={"run": 2},
    )
    worker = stack.start_worker(concurrency=2)

    app.send_task("notify.sweep")

    wait_for(lambda: receiver.hits, what="the sweep's POST", detail=worker.tail)
    wait_for(
        lambda: (
            Delivery.objects.get(pk=delivery.pk).status == Delivery.Status.DELIVERED
        ),
        what="the delivery recorded as delivered",
        detail=worker.tail,
    )
