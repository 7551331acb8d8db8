"""One run of the demo agent as a program drives it: the message posted with a
token, the run advanced on this thread (as the ``advance`` Celery task would), and
the frames a watching socket sends for what the run's driver pushed.

Four model calls: a read-only ``calculate``, a write (``create_ticket``), an
untrusted read (``search_notes``), then the answer. ``tests/budget`` counts what
it costs; ``tests/test_one_run_files.py`` traces the files it passes.
"""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import Group

from registry.models import ModelPrice, Tool
from runs import services as runs
from runs import tasks as run_tasks
from runs.consumers import TaskConsumer
from runs.models import DailyBudget, Task
from tests.support.clients import bearer_client
from tests.support.memory import remembered
from tests.support.replies import Script, text, tool_call

#: The message; "budget" and "recall" are the keywords of the routing
#: configuration's toolsets (so its route offers both, memory's recall too).
MESSAGE = (
    "Recall how budgets are reported, work out the budget, open a ticket for it "
    "and look up the Redis notes."
)
MODEL_CALLS = 4


def script(runs: int) -> Script:
    """``runs`` runs' replies, one run after another."""
    return Script(
        [
            tool_call("calculate", {"expression": "128 * 6 + 320"}),
            tool_call("create_ticket", {"title": "Budget", "body": "1088 in all"}),
            tool_call("search_notes", {"keyword": "Redis"}),
            text("The budget is 1088; ticket opened."),
        ]
        * runs
    )


def configure(demo: Any) -> None:
    """Switch on what users configure: memory, routing, budgets, prices, access."""
    agent = demo.agent
    agent.tool_tags = [*agent.tool_tags, "memory"]
    agent.toolsets = [
        {"tag": "demo", "description": "notes and tickets", "keywords": ["budget"]},
        {"tag": "memory", "description": "what you remember", "keywords": ["recall"]},
    ]
    agent.save()
    for number in range(3):
        remembered(demo.alice, f"Budgets are reported in USD ({number}).", f"s{number}")
    DailyBudget.objects.create(user=None, max_cost_usd=100.0, max_tokens=10**8)
    ModelPrice.objects.create(
        pattern="scripted-*",
        input_usd_per_m=Decimal("1"),
        output_usd_per_m=Decimal("2"),
    )
    staff, _ = Group.objects.get_or_create(name="budget-users")
    demo.alice.groups.add(staff)
    agent.allowed_users.add(demo.alice)
    agent.allowed_groups.add(staff)
    for tool in Tool.objects.all():
        tool.allowed_users.add(demo.alice)
        tool.allowed_groups.add(staff)


class Run:
    """One measured run: its counts, and the messages its driver pushed."""

    def __init__(self, demo: Any) -> None:
        self.demo = demo
        self.client = bearer_client(demo.alice)

    def conversation(self) -> Any:
        return runs.conversation_create(owner=self.demo.alice, agent=self.demo.agent)

    def post(self, conversation: Any) -> str:
        """Post the message as a program does; return its task's id."""
        response = self.client.post(
            f"/api/conversations/{conversation.pk}/messages/",
            {"content": MESSAGE},
            format="json",
        )
        assert response.status_code == 202, response.content
        return str(response.json()["task"])


def succeeded(task_id: str) -> Task:
    done = Task.objects.get(pk=task_id)
    assert done.status == "succeeded", (done.status, done.error_message)
    assert done.steps.filter(kind="model_call").count() == MODEL_CALLS
    return done


def advance(task_id: str) -> str:
    """What the ``advance`` Celery task runs (here, on this thread)."""
    run_tasks.task_advance(task_id=task_id)
    return task_id


def worker_push_recorder(pushed: list[dict[str, Any]]) -> Any:
    """``_Pusher.submit`` that also keeps each message the driver pushed."""
    from infra.push import _Pusher

    real = _Pusher.submit

    def submit(self: Any, group: str, message: dict[str, Any]) -> Any:
        if "base" in message:
            pushed.append(message)
        return real(self, group, message)

    return submit


def watching(
    task: Task, pushed: list[dict[str, Any]], *, html: bool
) -> tuple[TaskConsumer, list[dict[str, Any]]]:
    """A socket's consumer watching ``task`` from before the first of ``pushed``
    (the driver's messages), and the frames it sends; ``html`` as a browser's
    socket (each step with its list item)."""
    sent: list[dict[str, Any]] = []

    async def base_send(message: dict[str, Any]) -> None:
        sent.append(message)

    consumer = TaskConsumer()
    consumer.scope = {"type": "websocket", "query_string": b"", "user": None}
    consumer.base_send = base_send
    consumer.task_id = str(task.pk)
    consumer.cursor = int(pushed[0]["base"])
    consumer.status_sent = "running"
    consumer.html = html
    consumer._sending = asyncio.Lock()
    return consumer, sent


async def deliver(consumer: TaskConsumer, pushed: list[dict[str, Any]]) -> None:
    """Hand ``pushed`` to ``consumer`` as Channels delivers them (``dispatch``)."""
    for message in pushed:
        await consumer.dispatch(message)


def check_frames(
    consumer: TaskConsumer, pushed: list[dict[str, Any]], sent: list[Any], html: bool
) -> None:
    """Each message was sent on as it came (the socket had all before it), the
    steps with their list item when ``html``."""
    assert consumer.cursor == int(pushed[-1]["rev"])
    steps = [
        frame["text"] for frame in sent if json.loads(frame["text"])["type"] == "step"
    ]
    assert steps and all(('"html"' in step) is html for step in steps)
