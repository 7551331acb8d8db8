"""Two agents that hand a conversation to each other, and a model that plays both.

``desk_agents()`` makes ``frontdesk`` (reads the notes with ``search_notes``) and
``billing`` (writes: ``create_ticket``, and ``calculate``), each able to hand off
to the other. ``Desk`` is a scripted model's handler that answers as whichever
agent the request's system prompt names, from that agent's plan: the k-th call
of a tool in a plan is made once the conversation holds fewer than k calls of
it, then the agent's answer. Stateless (decided from the request alone), so a
worker that resumes a run and asks again gets the same reply.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from registry.models import Agent, Tool
from registry.services import agent_handoffs_set
from tests.support.replies import AnyReply, RecordingHandler, text, tool_call
from tests.support.scripted_model import last_user_text, messages_of

TICKET = {"title": "Refund order 42", "body": "The customer was charged twice."}
#: A plan step: a tool and its arguments.
Call = tuple[str, Mapping[str, Any]]

_AGENT = re.compile(r"\(agent:([a-z0-9_-]+)\)")


def instructions(name: str) -> str:
    """What each test agent is told: its name, where ``Desk`` reads it."""
    return f"You are the {name} desk. (agent:{name})"


def desk_agents(**limits: Any) -> SimpleNamespace:
    """``frontdesk`` and ``billing``, handing off to each other (``limits``: the
    frontdesk's, e.g. ``max_steps=3``)."""
    tools = {t.name: t for t in Tool.objects.all()}
    frontdesk = Agent.objects.create(
        name="frontdesk", instructions=instructions("frontdesk"), **limits
    )
    frontdesk.tools.set([tools["search_notes"]])
    billing = Agent.objects.create(name="billing", instructions=instructions("billing"))
    billing.tools.set([tools["create_ticket"], tools["calculate"]])
    agent_handoffs_set(
        agent=frontdesk, targets=[(billing, "Refunds, invoices and tickets.")]
    )
    agent_handoffs_set(
        agent=billing, targets=[(frontdesk, "Anything that is not billing.")]
    )
    frontdesk.refresh_from_db()
    billing.refresh_from_db()
    return SimpleNamespace(frontdesk=frontdesk, billing=billing)


def acting(request: Mapping[str, Any]) -> str:
    """The agent a request speaks for (its system prompt names it)."""
    system = messages_of(request)[0]
    found = _AGENT.search(str(system.get("content")))
    return found.group(1) if found else ""


def calls_made(request: Mapping[str, Any]) -> list[str]:
    """The tools the conversation called so far, in order."""
    return [
        call["function"]["name"]
        for message in messages_of(request)
        if message.get("role") == "assistant"
        for call in message.get("tool_calls") or []
    ]


class Desk(RecordingHandler):
    """Answers as the acting agent, from ``plans`` (agent: calls) and
    ``answers`` (agent: its final text); ``goals`` gives other plans to the runs
    of some goals (goal: plans)."""

    def __init__(
        self,
        plans: Mapping[str, Sequence[Call]],
        answers: Mapping[str, str] | None = None,
        goals: Mapping[str, Mapping[str, Sequence[Call]]] | None = None,
    ) -> None:
        super().__init__()
        self.plans = plans
        self.answers = answers or {}
        self.goals = goals or {}

    def respond(self, request: dict[str, Any]) -> AnyReply:
        agent = acting(request)
        made = calls_made(request)
        plans = self.goals.get(last_user_text(request), self.plans)
        seen: dict[str, int] = {}
        for name, arguments in plans.get(agent, ()):
            seen[name] = seen.get(name, 0) + 1
            if made.count(name) < seen[name]:
                return tool_call(name, dict(arguments))
        return text(self.answers.get(agent, f"{agent} is done."))

    def agents_asked(self) -> list[str]:
        """The acting agent of each request, in order."""
        return [acting(request) for request in self.requests]

    def tools_offered(self, index: int) -> set[str]:
        """The tools offered in request ``index``."""
        return {t["function"]["name"] for t in self.requests[index].get("tools") or []}
