"""A run's finish heard by two processes at once queues one completion webhook
and sends it once: the delivery's key is unique, and the loser of the race
reads the winner's row. Real threads with their own connections, on a file
SQLite database and on PostgreSQL (``-m dbsensitive`` with DATABASE_URL)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from notify import completion
from notify.delivery import deliveries_sweep
from notify.models import Delivery
from runs import services as runs
from runs.models import Task
from tests.support.http_servers import Reply
from tests.support.racing import at_once
from tests.support.replies import Script, text
from tests.support.runs import ask

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.dbsensitive]


def test_a_finish_heard_twice_at_once_is_queued_and_sent_once(
    local_server, model, demo, settings
):
    settings.REACH_INTERNAL_HOSTS = ["127.0.0.1"]
    receiver = local_server(lambda hit: Reply(status=200))
    model(Script([text("done")]))
    conversation = runs.conversation_create(
        owner=demo.alice, agent=demo.agent, webhook_url=receiver.url("/")
    )
    task = ask(demo.alice, demo.agent, "hello", conversation)
    Delivery.objects.all().delete()

    def hear() -> Any:
        with transaction.atomic():
            fresh = Task.objects.get(pk=task.pk)
            return completion.completion_queue(
                task=fresh, event=completion.CompletionEvent.RUN_FINISHED
            ).pk

    first, second = at_once([hear, hear])

    assert not isinstance(first, BaseException), first
    assert not isinstance(second, BaseException), second
    assert first == second
    assert Delivery.objects.filter(key=f"run.finished:{task.pk}").count() == 1
    deliveries_sweep()
    deliveries_sweep()
    assert len(receiver.hits) == 1
