"""The effect ledger: a write executed twice with one idempotency key happens once."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.core import mail
from django.db import connection

from effects.models import Outbox, Ticket, ToolExecution
from engine.execution import ToolError
from engine.spec import CallContext
from infra.mail import message_id_for
from registry.services import agent_snapshot, toolbox_for_snapshot
from tests.support.cast import EMAIL, TICKET

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "11111111-2222-3333-4444-555555555555:3:0"


def call(demo: Any, tool: str, arguments: dict[str, Any], key: str = KEY) -> Any:
    """Run a built-in handler exactly as the executor does, with this key."""
    toolbox = toolbox_for_snapshot(agent_snapshot(demo.agent))
    spec = toolbox.specs[tool]
    context = CallContext(
        task_id="",
        seq=4,
        idempotency_key=key,
        tool=spec,
        deadline=time.monotonic() + 10,
    )
    return toolbox.handlers[tool](dict(arguments), context)


def test_create_ticket_twice_with_one_key_makes_one_ticket_and_replays_the_result(
    demo,
):
    first = call(demo, "create_ticket", TICKET)
    second = call(demo, "create_ticket", TICKET)

    assert Ticket.objects.count() == 1
    ticket = Ticket.objects.get()
    assert ticket.idempotency_key == KEY
    assert first == {"ticket_id": ticket.pk, "title": "Cache", "status": "created"}
    assert second == {**first, "deduplicated": True}
    assert ToolExecution.objects.get().idempotency_key == KEY


def test_send_email_twice_with_one_key_queues_and_sends_one_mail(demo):
    first = call(demo, "send_email", EMAIL)
    second = call(demo, "send_email", EMAIL)

    assert Outbox.objects.count() == 1
    assert len(mail.outbox) == 1
    sent = mail.outbox[0]
    assert sent.to == ["ops@example.com"]
    assert sent.subject == "report"
    assert sent.extra_headers["Message-ID"] == message_id_for(KEY)
    assert first["status"] == "sent"
    assert second["deduplicated"] is True
    assert second["message_id"] == first["message_id"]


def test_a_key_reused_with_other_arguments_is_refused(demo):
    call(demo, "create_ticket", TICKET)
    with pytest.raises(ToolError, match="other arguments"):
        call(demo, "create_ticket", {**TICKET, "title": "Something else"})
    assert Ticket.objects.count() == 1


def test_other_keys_are_other_writes(demo):
    call(demo, "create_ticket", TICKET, key=KEY)
    call(demo, "create_ticket", TICKET, key=KEY.replace(":0", ":1"))
    assert Ticket.objects.count() == 2


@pytest.mark.dbsensitive
def test_concurrent_executions_of_one_key_make_one_ticket(demo):
    toolbox = toolbox_for_snapshot(agent_snapshot(demo.agent))
    spec = toolbox.specs["create_ticket"]
    handler = toolbox.handlers["create_ticket"]
    barrier = threading.Barrier(8)
    results: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            barrier.wait(timeout=10)
            context = CallContext(
                task_id="", seq=4, idempotency_key=KEY, tool=spec, deadline=0
            )
            results.append(handler(dict(TICKET), context))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    assert Ticket.objects.count() == 1
    assert len(results) == 8
    assert len({r["ticket_id"] for r in results}) == 1
    assert sum(1 for r in results if not r.get("deduplicated")) == 1
