"""The daily budget under messages sent at once: checked and held in the
transaction that accepts each message (runs.budgets.budget_take), so what one
run may spend is not promised twice. SQLite and PostgreSQL (dbsensitive).

No worker runs here: an accepted run stays queued, holding its share.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from audit.models import AuditEvent, AuditKind
from registry.models import ModelPrice
from runs import services as runs
from runs.budgets import DailyBudgetExceeded, budget_status
from runs.models import BudgetHold, DailyBudget, Message, Task
from tests.support.clients import bearer_client, post_message
from tests.support.racing import at_once

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.dbsensitive]

SENDERS = 6


def conversations(user: Any, agent: Any, n: int = SENDERS) -> list[Any]:
    return [runs.conversation_create(owner=user, agent=agent) for _ in range(n)]


def post_at_once(user: Any, conversation_ids: list[Any]) -> list[Any]:
    """One API client per sender (each its own token), all released together."""
    clients = [bearer_client(user) for _ in conversation_ids]
    jobs = [
        (lambda c=client, pk=pk: post_message(c, pk, f"message to {pk}"))
        for client, pk in zip(clients, conversation_ids, strict=True)
    ]
    results = at_once(jobs)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    return results


def test_of_messages_sent_at_once_a_budget_for_one_run_accepts_exactly_one(alice, demo):
    demo.agent.token_budget = 5_000
    demo.agent.save()
    DailyBudget.objects.create(user=alice, max_tokens=5_000)
    ids = [c.pk for c in conversations(alice, demo.agent)]

    responses = post_at_once(alice, ids)

    codes = sorted(r.status_code for r in responses)
    assert codes == [202] + [429] * (SENDERS - 1), [r.content for r in responses]
    [task] = Task.objects.filter(owner=alice)
    hold = BudgetHold.objects.get(task=task)
    assert (hold.tokens, hold.cost_usd) == (5_000, 0.0)
    for refused in (r for r in responses if r.status_code == 429):
        body = refused.json()
        assert "Your daily budget is used up" in body["error"]
        assert "5,000 tokens held by runs still going" in body["error"]
        assert body["budget"]["held_tokens"] == 5_000
        assert body["budget"]["spent_tokens"] == 0
        assert 0 < int(refused["Retry-After"]) <= 86_401
    # Nothing of the refused messages was kept but their refusals.
    assert Message.objects.filter(task__owner=alice).count() == 1
    assert (
        AuditEvent.objects.filter(kind=AuditKind.BUDGET_DAILY_REFUSED).count()
        == SENDERS - 1
    )


def test_a_budget_for_two_runs_accepts_exactly_two(alice, demo):
    demo.agent.token_budget = 3_000
    demo.agent.save()
    DailyBudget.objects.create(user=alice, max_tokens=6_000)
    ids = [c.pk for c in conversations(alice, demo.agent)]

    responses = post_at_once(alice, ids)

    assert sorted(r.status_code for r in responses) == [202, 202] + [429] * (
        SENDERS - 2
    )
    assert Task.objects.filter(owner=alice).count() == 2
    assert sorted(BudgetHold.objects.values_list("tokens", flat=True)) == [3000, 3000]


def test_a_usd_budget_holds_the_runs_cost_limit_through_the_service(alice, demo):
    ModelPrice.objects.create(
        pattern="*", input_usd_per_m=Decimal("1"), output_usd_per_m=Decimal("2")
    )
    demo.agent.max_cost_usd = 0.25
    demo.agent.save()
    DailyBudget.objects.create(user=None, max_cost_usd=0.5)  # the default one
    targets = conversations(alice, demo.agent)

    def send(conversation: Any) -> Any:
        return runs.message_send(
            conversation=conversation, content="go", enforce_budget=True
        )

    results = at_once([lambda c=c: send(c) for c in targets])

    refused = [r for r in results if isinstance(r, DailyBudgetExceeded)]
    sent = [r for r in results if isinstance(r, runs.Sent)]
    assert len(sent) == 2 and len(refused) == SENDERS - 2, results
    assert sorted(BudgetHold.objects.values_list("cost_usd", flat=True)) == [
        pytest.approx(0.25),
        pytest.approx(0.25),
    ]
    assert refused[0].status.held_cost_usd == pytest.approx(0.5)


def test_a_hold_ends_with_its_run_and_what_it_spent_counts_instead(alice, demo):
    demo.agent.token_budget = 5_000
    demo.agent.save()
    DailyBudget.objects.create(user=alice, max_tokens=5_000)
    first, second = conversations(alice, demo.agent, 2)
    task = runs.task_start(conversation=first, content="one", enforce_budget=True)
    with pytest.raises(DailyBudgetExceeded):
        runs.task_start(conversation=second, content="two", enforce_budget=True)

    # Half way: what it spent is part of what it holds, not added to it.
    Task.objects.filter(pk=task.pk).update(total_tokens=1_200)
    status = budget_status(user=alice)
    assert (status.spent_tokens, status.held_tokens) == (1_200, 3_800)
    assert status.exceeded

    Task.objects.filter(pk=task.pk).update(status="succeeded")
    status = budget_status(user=alice)
    assert (status.spent_tokens, status.held_tokens) == (1_200, 0)
    again = runs.task_start(conversation=second, content="two", enforce_budget=True)
    # Held: at most what was left.
    assert BudgetHold.objects.get(task=again).tokens == 3_800


def test_without_a_budget_nothing_is_held(alice, demo):
    ids = [c.pk for c in conversations(alice, demo.agent, 3)]
    responses = post_at_once(alice, ids)
    assert [r.status_code for r in responses] == [202, 202, 202]
    assert not BudgetHold.objects.exists()


def test_a_second_message_to_a_busy_conversation_is_queued_not_refused(alice, demo):
    """The first run holds the whole budget, yet a message behind it is queued
    (the conversation's default): it holds nothing until its own run starts."""
    demo.agent.token_budget = 5_000
    demo.agent.save()
    DailyBudget.objects.create(user=alice, max_tokens=5_000)
    conversation = runs.conversation_create(owner=alice, agent=demo.agent)
    client = bearer_client(alice)

    first = post_message(client, conversation.pk, "one")
    second = post_message(client, conversation.pk, "two")

    assert first.status_code == 202, first.content
    assert second.status_code == 202, second.content
    assert second.json()["queued"]["state"] == "queued"
    assert BudgetHold.objects.filter(task__owner=alice).count() == 1
