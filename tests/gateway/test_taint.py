"""Gateway taint in-process: a call inherits what earlier calls of its MCP session,
and of its user within ``REACH_GATEWAY_TAINT_WINDOW_S``, read untrusted; the
engine's own rule then parks its writes (the runs advanced here, as the worker
would)."""

from __future__ import annotations

import datetime as dt

import pytest

from effects.models import Ticket
from gateway.models import McpCall
from gateway.selectors import carried_taint
from gateway.services import gateway_call_outcome, gateway_call_start
from runs.models import Task
from tests.support.runs import advance, pending

pytestmark = pytest.mark.django_db(transaction=True)

TICKET = {"title": "Rotate the keys", "body": "Before Friday."}


def _call(demo, user, tool, arguments, session=""):
    task = gateway_call_start(
        user=user, agent=demo.agent, tool=tool, arguments=arguments, session=session
    )
    return advance(task)


def _read_notes(demo, user, session=""):
    read = _call(demo, user, "search_notes", {"keyword": "Redis"}, session)
    assert read.status == "succeeded" and read.tainted_by, read.tainted_by
    return read


def _age(task: Task, seconds: float) -> None:
    """Move ``task``'s last activity ``seconds`` into the past."""
    then = task.updated_at - dt.timedelta(seconds=seconds)
    Task.objects.filter(pk=task.pk).update(updated_at=then)


def test_a_write_after_an_untrusted_read_in_the_same_session_parks(
    demo, alice, flush_redis
):
    read = _read_notes(demo, alice, "s-1")
    (source,) = read.tainted_by
    assert source.startswith("search_notes#") and source.endswith(str(read.pk)[:8])

    write = _call(demo, alice, "create_ticket", TICKET, "s-1")
    assert write.status == "waiting_approval"
    assert write.inherited_taint == [source]
    (approval,) = pending(write)
    assert approval.tool == "create_ticket"
    assert not Ticket.objects.exists()

    # The answer says it waits, for which approval, and because of what.
    outcome = gateway_call_outcome(task_id=write.pk)
    assert not outcome.done and outcome.is_error
    assert outcome.status == "waiting_approval"
    assert outcome.approval_id == str(approval.pk)
    assert "waits for a human's approval" in outcome.text
    assert source in outcome.text and outcome.tainted_by == (source,)
    assert outcome.meta()["tainted_by"] == [source]
    assert McpCall.objects.get(task=write).session == "s-1"


def test_the_session_taint_does_not_lapse_with_the_window(demo, alice, flush_redis):
    read = _read_notes(demo, alice, "s-old")
    _age(read, 10 * 900)
    assert _call(demo, alice, "create_ticket", TICKET, "s-old").status == (
        "waiting_approval"
    )
    # Another session of the same user, after the window: nothing carried.
    fresh = _call(demo, alice, "create_ticket", TICKET, "s-new")
    assert fresh.status == "succeeded" and fresh.tainted_by == []
    assert Ticket.objects.count() == 1


def test_a_fresh_session_within_the_window_parks_and_after_it_does_not(
    demo, alice, settings, flush_redis
):
    settings.REACH_GATEWAY_TAINT_WINDOW_S = 600
    read = _read_notes(demo, alice, "s-read")

    within = _call(demo, alice, "create_ticket", TICKET, "s-write-1")
    assert within.status == "waiting_approval"
    assert within.inherited_taint == list(read.tainted_by)
    # A client that keeps no session at all gets the same rule.
    sessionless = _call(demo, alice, "create_ticket", TICKET)
    assert sessionless.status == "waiting_approval"
    assert not Ticket.objects.exists()

    _age(read, 601)
    after = _call(demo, alice, "create_ticket", TICKET, "s-write-2")
    assert after.status == "succeeded", after.error_message
    assert after.tainted_by == [] and not pending(after)
    assert Ticket.objects.count() == 1


def test_a_session_of_trusted_reads_is_not_parked(demo, alice, flush_redis):
    calc = _call(demo, alice, "calculate", {"expression": "128 * 6"}, "s-clean")
    assert calc.status == "succeeded" and calc.tainted_by == []
    write = _call(demo, alice, "create_ticket", TICKET, "s-clean")
    assert write.status == "succeeded" and not pending(write)
    assert Ticket.objects.get().title == TICKET["title"]
    outcome = gateway_call_outcome(task_id=write.pk)
    assert outcome.done and not outcome.is_error and "tainted_by" not in outcome.meta()


def test_the_taint_is_the_users_own_not_another_users(demo, alice, bob, flush_redis):
    _read_notes(demo, alice, "shared-id")
    # Bob names the same session id (ids are the client's to send): it is a
    # scope of his own, and alice's read is not his.
    write = _call(demo, bob, "create_ticket", TICKET, "shared-id")
    assert write.status == "succeeded" and write.tainted_by == []


def test_a_trusted_read_made_while_tainted_does_not_stretch_the_window(
    demo, alice, settings, flush_redis
):
    settings.REACH_GATEWAY_TAINT_WINDOW_S = 600
    read = _read_notes(demo, alice, "a")
    calc = _call(demo, alice, "calculate", {"expression": "1 + 1"}, "b")
    # It inherited the taint (a tainted run may still read inside the house)...
    assert calc.status == "succeeded" and calc.tainted_by == list(read.tainted_by)
    # ...but only what a call read itself is carried on to other sessions.
    _age(read, 601)
    assert carried_taint(user=alice, session="c", now=calc.updated_at) == []
    # Within session b the inherited taint is not b's own either: the read was a's.
    assert carried_taint(user=alice, session="b", now=calc.updated_at) == []
    assert carried_taint(user=alice, session="a", now=calc.updated_at) == list(
        read.tainted_by
    )
