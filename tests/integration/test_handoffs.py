"""Handoffs on real processes: a Celery worker drives the runs, the test decides.

The scripted model (``tests.support.handoffs.Desk``, real HTTP on loopback)
answers as whichever agent acts; the worker subprocess talks to it through the
real ``openai`` SDK and writes to this test's database.
"""

from __future__ import annotations

from typing import Any

import pytest

from approvals.services import approval_decide
from effects.models import Ticket
from runs.models import Task
from tests.support.handoffs import TICKET, Desk, desk_agents
from tests.support.runs import pending, start
from tests.support.scripted_model import ScriptedModel
from tests.support.stack import Stack
from tests.support.waiting import wait_for
from traces.fork import task_fork

pytestmark = [pytest.mark.integration]

READ = ("search_notes", {"keyword": "Redis"})
HAND_TO_BILLING = ("transfer_to_billing", {})
HAND_TO_FRONTDESK = ("transfer_to_frontdesk", {})


def settled(task: Any, *statuses: str) -> Task:
    """``task`` once it reaches one of ``statuses`` (read fresh)."""

    def reached() -> Task | None:
        fresh = Task.objects.get(pk=task.pk)
        return fresh if fresh.status in statuses else None

    return wait_for(reached, 60, what=f"task {task.pk} to be {' or '.join(statuses)}")


def agents_of(task: Task) -> list[tuple[str | None, str | None, str]]:
    return [(s.agent, s.tool, s.status) for s in task.steps.order_by("seq")]


def test_a_write_after_a_tainted_read_and_a_handoff_waits_and_a_fork_resumes_as_billing(
    stack: Stack, alice: Any, operator: Any, demo: Any
):
    desks = desk_agents()
    server = ScriptedModel(
        Desk(
            {
                "frontdesk": [READ, HAND_TO_BILLING],
                "billing": [("create_ticket", TICKET)],
            },
            {"billing": "Ticket opened."},
        )
    ).start()
    try:
        stack.env["OPENAI_BASE_URL"] = server.base_url
        stack.start_worker()
        task = start(alice, desks.frontdesk, "Refund order 42")

        task = settled(task, "waiting_approval", "succeeded", "failed", "stopped")
        assert task.status == "waiting_approval", task.error_message
        write = task.steps.get(tool="create_ticket")
        assert (write.agent, write.status) == ("billing", "waiting_approval")
        assert write.tainted_by and write.tainted_by[0].startswith("search_notes#2@")
        assert Ticket.objects.count() == 0

        [approval] = pending(task)
        approval_decide(approval=approval, user=operator, decision="approve")
        task = settled(task, "succeeded", "failed", "stopped")
        assert (task.status, task.final_answer) == ("succeeded", "Ticket opened.")
        assert agents_of(task) == [
            ("frontdesk", None, "succeeded"),
            ("frontdesk", "search_notes", "succeeded"),
            ("frontdesk", None, "succeeded"),
            ("frontdesk", "transfer_to_billing", "succeeded"),
            ("billing", None, "succeeded"),
            ("billing", "create_ticket", "succeeded"),
            ("billing", None, "succeeded"),
        ]
        assert Ticket.objects.count() == 1

        # A fork from billing's write, run by the worker: planned as billing's
        # call, still tainted by the frontdesk's read, so it waits again.
        child = task_fork(task=task, user=alice, from_seq=write.seq)
        child = settled(child, "waiting_approval", "succeeded", "failed", "stopped")
        assert child.status == "waiting_approval", child.error_message
        forked = child.steps.get(seq=write.seq)
        assert (forked.agent, forked.status) == ("billing", "waiting_approval")
        assert forked.tainted_by == write.tainted_by
        [again] = pending(child)
        approval_decide(approval=again, user=operator, decision="reject", reason="no")
        child = settled(child, "succeeded", "failed", "stopped")
        assert child.steps.order_by("-seq").first().agent == "billing"
        assert Ticket.objects.count() == 1
    finally:
        server.stop()


def test_refused_handoffs_loops_and_max_steps_across_agents_on_the_worker(
    stack: Stack, alice: Any, bob: Any, demo: Any
):
    desks = desk_agents(max_steps=3)
    desks.billing.allowed_users.set([bob])
    server = ScriptedModel(
        Desk(
            {"frontdesk": [HAND_TO_BILLING]},
            {"frontdesk": "I cannot pass you on.", "billing": "Billing here."},
            goals={
                "loop": {
                    "frontdesk": [HAND_TO_BILLING] * 3,
                    "billing": [HAND_TO_FRONTDESK] * 3,
                },
                "count": {
                    "frontdesk": [HAND_TO_BILLING],
                    "billing": [
                        ("calculate", {"expression": f"{n} + {n}"}) for n in (1, 2, 3)
                    ],
                },
            },
        )
    ).start()
    try:
        stack.env["OPENAI_BASE_URL"] = server.base_url
        stack.start_worker()
        refused = start(alice, desks.frontdesk, "refund please")
        looped = start(bob, desks.frontdesk, "loop")
        counted = start(bob, desks.frontdesk, "count")

        refused = settled(refused, "succeeded", "failed", "stopped")
        assert refused.final_answer == "I cannot pass you on."
        step = refused.steps.get(tool="transfer_to_billing")
        assert (step.status, step.error_class) == ("failed", "handoff_refused")

        looped = settled(looped, "succeeded", "failed", "stopped")
        assert (looped.status, looped.stop_reason) == ("stopped", "handoff_loop")
        assert [s for s in agents_of(looped) if s[1]] == [
            ("frontdesk", "transfer_to_billing", "succeeded"),
            ("billing", "transfer_to_frontdesk", "succeeded"),
            ("frontdesk", "transfer_to_billing", "skipped"),
        ]

        counted = settled(counted, "succeeded", "failed", "stopped")
        assert (counted.status, counted.stop_reason) == ("stopped", "max_steps")
        assert [a for a, tool, _ in agents_of(counted) if tool is None] == [
            "frontdesk",
            "billing",
            "billing",
        ]
    finally:
        server.stop()
