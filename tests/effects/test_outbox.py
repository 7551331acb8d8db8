"""The outbox dispatcher against a real SMTP server on loopback.

A row is ``sending`` from its claim until the send returns; the reaper of stuck
sends must judge it by that claim, never by how long the mail waited before.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from effects.dispatch import outbox_dispatch, outbox_reset_stuck
from effects.models import Outbox
from effects.services import queue_email
from effects.tasks import dispatch_outbox

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "task:1:0"


def waited(minutes: int) -> Outbox:
    """A queued mail, written ``minutes`` ago."""
    queue_email(key=KEY, to="ops@example.com", subject="report", body="The report.")
    Outbox.objects.update(created_at=timezone.now() - timedelta(minutes=minutes))
    return Outbox.objects.get()


def send_in_thread() -> threading.Thread:
    """Dispatch the mail on another thread (and database connection), as a
    worker would while beat runs beside it."""

    def run() -> None:
        try:
            outbox_dispatch(key=KEY)
        finally:
            connection.close()

    thread = threading.Thread(target=run, name="dispatcher")
    thread.start()
    return thread


@pytest.mark.dbsensitive
def test_a_mail_that_waited_long_is_not_reset_while_its_first_send_is_in_flight(
    smtp,
):
    server = smtp(hold_first=True)
    waited(minutes=20)
    first = send_in_thread()
    assert server.first_received.wait(10), "the first send never reached the server"
    assert Outbox.objects.get().status == "sending"

    # What beat runs every 30 seconds, while the first send waits for its reply.
    dispatch_outbox()

    server.release()
    first.join(10)
    assert not first.is_alive()
    assert len(server.messages) == 1
    row = Outbox.objects.get()
    assert row.status == "sent"
    assert row.attempts == 1
    assert row.claimed_at is not None and row.claimed_at > row.created_at


def test_the_claim_time_is_recorded_with_the_claim(smtp):
    smtp()
    before = timezone.now()
    waited(minutes=20)

    assert outbox_dispatch(key=KEY) == "sent"

    row = Outbox.objects.get()
    assert row.claimed_at is not None
    assert before <= row.claimed_at <= row.sent_at


def test_a_send_claimed_long_ago_is_reset_and_sent_again_with_the_same_message_id(
    smtp,
):
    server = smtp()
    row = waited(minutes=1)
    # A dispatcher claimed it eleven minutes ago and died.
    Outbox.objects.filter(pk=row.pk).update(
        status="sending",
        attempts=1,
        claimed_at=timezone.now() - timedelta(minutes=11),
    )

    assert outbox_reset_stuck() == 1
    assert outbox_dispatch() == "sent"

    [received] = server.messages
    assert received.message["Message-ID"] == row.message_id
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("sent", 2)


def test_a_recent_claim_is_left_alone_whenever_the_mail_was_written(smtp):
    row = waited(minutes=60)
    Outbox.objects.filter(pk=row.pk).update(
        status="sending", claimed_at=timezone.now() - timedelta(seconds=30)
    )

    assert outbox_reset_stuck() == 0
    assert Outbox.objects.get().status == "sending"


def test_a_row_claimed_before_claims_were_recorded_is_reset_by_its_age(smtp):
    row = waited(minutes=20)
    Outbox.objects.filter(pk=row.pk).update(status="sending", claimed_at=None)

    assert outbox_reset_stuck() == 1
    assert Outbox.objects.get().status == "pending"
