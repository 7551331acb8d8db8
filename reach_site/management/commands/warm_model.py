"""``manage.py warm_model``: read the default agent's prompt prefix into the model.

The first question after ``make up`` used to cost 25 s more than the next: the
built-in model had to read the agent's system prompt and tool definitions cold.
This sends exactly what a run's first model call sends (the engine's own
``build_messages`` and tool list for the default agent, at the version its chats
run) with a one-token answer,
so the server holds that prefix when the first user arrives. Where questions get
no write tool (``REACH_QUESTIONS_READ_ONLY`` and the agent's switch: the demo
question is such a question), a question's first call offers fewer tools, so a
second request warms that prefix too. The launcher runs it after the model is
ready; a run started meanwhile waits for the model as usual.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from openai import OpenAI, OpenAIError

from engine.context import build_messages
from engine.questions import for_question
from registry.services import (
    agent_snapshot_of,
    toolbox_for_snapshot,
    version_resolve,
)
from runs.selectors import default_agent

#: A stand-in message: only what comes before it is shared with real runs.
WARM_GOAL = "你好"
#: A stand-in question (engine.questions): what a question's first call offers.
WARM_QUESTION = "你好吗？"


def first_requests(agent: Any) -> list[dict[str, Any]]:
    """The bodies of a run's first model call for ``agent`` (but the message):
    a message's, then a question's when a question is offered fewer tools."""
    # The version a chat runs (the one labelled production), not the live row:
    # an edit waiting as a candidate would warm a prompt nobody sends.
    snapshot = agent_snapshot_of(agent, version=version_resolve(agent))
    toolbox = toolbox_for_snapshot(snapshot)
    bodies = [first_request(snapshot, toolbox, WARM_GOAL)]
    limits = snapshot.limits
    question = for_question(WARM_QUESTION, toolbox)
    if limits is not None and limits.questions_read_only and question is not None:
        bodies.append(first_request(snapshot, question.toolbox, WARM_QUESTION))
    return bodies


def first_request(snapshot: Any, toolbox: Any, goal: str) -> dict[str, Any]:
    """The body of a run's first model call with ``toolbox`` for ``goal``."""
    messages = build_messages(
        system=snapshot.system_prompt,
        history=[],
        goal=goal,
        steps=[],
        specs=toolbox.specs,
    )
    tools = [toolbox.specs[name].openai_tool() for name in toolbox.names()]
    body: dict[str, Any] = {"model": snapshot.model, "messages": messages}
    if tools:
        body.update(tools=tools, tool_choice="auto")
    return body


class Command(BaseCommand):
    help = "Warm the model with the default agent's prompt prefix."

    def handle(self, *args: Any, **options: Any) -> None:
        agent = default_agent()
        if agent is None:
            self.stdout.write("no agent yet: nothing to warm")
            return
        if not settings.OPENAI_BASE_URL:
            raise CommandError("OPENAI_BASE_URL is not set: no model to warm.")
        client = OpenAI(
            base_url=settings.OPENAI_BASE_URL,
            api_key=settings.OPENAI_API_KEY or "unused",
            timeout=settings.REACH_MODEL_TIMEOUT_S,
            max_retries=0,
        )
        for body in first_requests(agent):
            self.stdout.write(
                f"reading the {agent.name} agent's prompt and "
                f"{len(body.get('tools', []))} tool definitions into the model…"
            )
            started = time.monotonic()
            try:
                client.chat.completions.create(**body, max_tokens=1, temperature=0)
            except OpenAIError as exc:
                raise CommandError(f"warming the model failed: {exc}") from exc
            self.stdout.write(f"model warm in {time.monotonic() - started:.1f} s")
