"""A message sent while a run goes on: queue, interrupt or refuse.

The real database, the real runner and the scripted model over HTTP; the
queued message starts from the finish's commit, from the reaper when the
process that finished the run died first, and exactly once under a race.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from runs import followups
from runs import leases as run_leases
from runs import services as runs
from runs.models import Conversation, QueuedMessage, Task
from tests.support.racing import at_once
from tests.support.replies import Script, delay, text
from tests.support.runs import advance
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.dbsensitive]


def conversation_of(user: Any, agent: Any, on_busy: str = "queue") -> Conversation:
    return runs.conversation_create(owner=user, agent=agent, on_busy=on_busy)


def send(conversation: Conversation, content: str) -> runs.Sent:
    return runs.message_send(conversation=conversation, content=content)


def test_a_new_conversation_queues_by_default(alice, demo):
    conversation = runs.conversation_create(owner=alice, agent=demo.agent)
    assert conversation.on_busy == Conversation.OnBusy.QUEUE


def test_the_default_follows_the_setting(alice, demo, settings):
    settings.REACH_ON_BUSY = "refuse"
    conversation = runs.conversation_create(owner=alice, agent=demo.agent)
    assert conversation.on_busy == Conversation.OnBusy.REFUSE


def test_a_queued_message_starts_once_when_the_run_ends(alice, demo, model):
    model(Script([text("first answer"), text("second answer")]))
    conversation = conversation_of(alice, demo.agent)
    first = send(conversation, "one").task
    queued = send(conversation, "two").queued

    assert queued is not None and queued.state == QueuedMessage.State.QUEUED
    assert queued.behind_id == first.pk
    assert Task.objects.get(pk=first.pk).followup_queued
    assert conversation.tasks.count() == 1

    first = advance(first)
    assert first.status == "succeeded"
    queued.refresh_from_db()
    assert queued.state == QueuedMessage.State.STARTED
    second = Task.objects.get(pk=queued.task_id)
    assert second.goal == "two"
    assert conversation.tasks.count() == 2
    assert advance(second).final_answer == "second answer"
    # Nothing else was waiting: the second run started nothing more.
    assert conversation.tasks.count() == 2
    assert not second.followup_queued


def test_two_queued_messages_start_one_after_the_other(alice, demo, model):
    model(Script([text("a"), text("b"), text("c")]))
    conversation = conversation_of(alice, demo.agent)
    first = send(conversation, "one").task
    send(conversation, "two")
    send(conversation, "three")

    advance(first)
    second = conversation.tasks.get(goal="two")
    assert second.status == "queued"
    assert not conversation.tasks.filter(goal="three").exists()
    advance(second)
    third = conversation.tasks.get(goal="three")
    advance(third)
    assert list(conversation.queued_messages.values_list("state", flat=True)) == [
        "started",
        "started",
    ]


def test_a_cancelled_run_starts_what_was_queued_behind_it(alice, demo):
    conversation = conversation_of(alice, demo.agent)
    first = send(conversation, "one").task
    queued = send(conversation, "two").queued
    runs.task_cancel(task=first, user=alice)
    queued.refresh_from_db()
    assert queued.state == QueuedMessage.State.STARTED
    assert Task.objects.get(pk=queued.task_id).goal == "two"


def test_a_queued_message_survives_a_worker_that_died_mid_run(alice, demo, model):
    model(Script([text("finally")]))
    conversation = conversation_of(alice, demo.agent)
    first = send(conversation, "one").task
    queued = send(conversation, "two").queued
    # A worker claims the run and dies: its lease runs out, nobody finishes it.
    assert run_leases.task_claim(task_id=first.pk, owner="dead-worker") is not None
    Task.objects.filter(pk=first.pk).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert followups.queued_reap() == []  # its run has not ended: it waits

    advance(first)  # the reaper's re-queue, taken by another worker
    queued.refresh_from_db()
    assert queued.state == QueuedMessage.State.STARTED
    assert conversation.tasks.filter(goal="two").count() == 1


def test_the_reaper_starts_a_message_whose_start_was_lost_exactly_once(alice, demo):
    conversation = conversation_of(alice, demo.agent)
    first = send(conversation, "one").task
    queued = send(conversation, "two").queued
    # The run's finish committed and its process died before the start it
    # deferred to the commit ran.
    Task.objects.filter(pk=first.pk).update(status="succeeded")
    QueuedMessage.objects.filter(pk=queued.pk).update(
        created_at=timezone.now() - timedelta(minutes=5)
    )

    assert followups.queued_reap() == [str(conversation.pk)]
    assert followups.queued_reap() == []
    queued.refresh_from_db()
    assert queued.state == QueuedMessage.State.STARTED
    assert conversation.tasks.filter(goal="two").count() == 1


def test_racing_starts_of_one_queued_message_start_one_run(alice, demo):
    conversation = conversation_of(alice, demo.agent)
    first = send(conversation, "one").task
    queued = send(conversation, "two").queued
    Task.objects.filter(pk=first.pk).update(status="succeeded")

    results = at_once(
        [lambda: runs.queued_start_next(conversation_id=conversation.pk)] * 6
    )
    assert not [r for r in results if isinstance(r, BaseException)], results
    started = [r for r in results if r is not None]
    assert len(started) == 1
    queued.refresh_from_db()
    assert queued.task_id == started[0].pk
    assert conversation.tasks.filter(goal="two").count() == 1


def test_a_message_that_can_no_longer_start_is_marked_failed_with_why(alice, demo):
    conversation = conversation_of(alice, demo.agent)
    first = send(conversation, "one").task
    queued = send(conversation, "two").queued
    demo.agent.allowed_users.add(demo.bob)  # now only bob may use it
    runs.task_cancel(task=first, user=alice)

    queued.refresh_from_db()
    assert queued.state == QueuedMessage.State.FAILED
    assert "no longer use the agent" in queued.error
    assert not conversation.tasks.filter(goal="two").exists()


def test_interrupt_cancels_an_idle_run_and_starts_one_with_both_messages(alice, demo):
    conversation = conversation_of(alice, demo.agent, on_busy="interrupt")
    first = send(conversation, "find the budget").task
    queued = send(conversation, "and in euros").queued

    assert queued.mode == QueuedMessage.Mode.INTERRUPT
    first.refresh_from_db()
    assert (first.status, first.stop_reason) == ("cancelled", "cancelled")
    queued.refresh_from_db()
    second = Task.objects.get(pk=queued.task_id)
    assert second.goal == "find the budget\n\nand in euros"
    assert second.status == "queued"


def test_interrupt_stops_a_running_run_at_its_next_step_boundary(alice, demo, model):
    # The first model call takes a while: the interrupt lands while it runs.
    script = Script([delay(1.5, text("too late")), text("both answered")])
    model(script)
    conversation = conversation_of(alice, demo.agent, on_busy="interrupt")
    first = send(conversation, "one").task
    worker = threading.Thread(target=advance, args=(first,), daemon=True)
    worker.start()
    wait_for(lambda: script.requests, what="the first run's model call")
    queued = send(conversation, "two").queued
    assert Task.objects.get(pk=first.pk).cancel_requested
    worker.join(30)

    first.refresh_from_db()
    assert first.stop_reason == "cancelled"
    assert first.final_answer is None  # its model's late reply was not used
    queued.refresh_from_db()
    second = Task.objects.get(pk=queued.task_id)
    assert second.goal == "one\n\ntwo"
    assert advance(second).final_answer == "both answered"
    assert script.requests[-1]["messages"][-1]["content"] == "one\n\ntwo"


def test_refuse_answers_busy_with_the_active_task(alice, demo):
    conversation = conversation_of(alice, demo.agent, on_busy="refuse")
    first = send(conversation, "one").task
    with pytest.raises(runs.ConversationBusy) as busy:
        send(conversation, "two")
    assert busy.value.task.pk == first.pk
    assert not QueuedMessage.objects.exists()


def test_the_api_answers_202_with_the_queued_message(alice, demo, api_client_for):
    client = api_client_for(alice)
    created = client.post("/api/conversations/", {}, format="json").json()
    assert created["on_busy"] == "queue"
    url = f"/api/conversations/{created['id']}/messages/"
    first = client.post(url, {"content": "one"}, format="json")
    second = client.post(url, {"content": "two"}, format="json")

    assert first.status_code == 202 and first.json()["task"]
    assert second.status_code == 202
    body = second.json()
    assert body["task"] is None
    assert body["queued"]["state"] == "queued"
    assert body["queued"]["behind"] == first.json()["task"]
    assert body["queued"]["content"] == "two"
    listed = client.get(f"/api/conversations/{created['id']}/queue/").json()
    assert [q["id"] for q in listed] == [body["queued"]["id"]]


def test_the_api_changes_a_conversations_choice(alice, bob, demo, api_client_for):
    client = api_client_for(alice)
    created = client.post("/api/conversations/", {}, format="json").json()
    url = f"/api/conversations/{created['id']}/"

    changed = client.patch(url, {"on_busy": "refuse"}, format="json")
    assert changed.status_code == 200 and changed.json()["on_busy"] == "refuse"
    assert Conversation.objects.get(pk=created["id"]).on_busy == "refuse"
    wrong = client.patch(url, {"on_busy": "later"}, format="json")
    assert wrong.status_code == 400
    assert "queue, interrupt, refuse" in wrong.json()["on_busy"][0]
    # Bob cannot see, let alone change, alice's conversation.
    assert api_client_for(bob).patch(url, {"on_busy": "queue"}).status_code == 404
    assert api_client_for(bob).get(f"{url}queue/").status_code == 404
