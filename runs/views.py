"""The chat pages: conversation list, the open conversation, a message box."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from infra.views import post_only
from registry.access import may_use_agent, usable_agents
from registry.models import Agent
from registry.services import offered_tools_now
from runs import selectors
from runs import services as runs
from runs.budgets import budget_status
from runs.models import Conversation, Message, QueuedMessage, Step, Task


@dataclass
class Turn:
    """One user message, the run it started and the reply (what the chat shows)."""

    message: Message
    task: Task | None = None
    steps: list[Step] = field(default_factory=list)
    reply: Message | None = None

    @property
    def max_rev(self) -> int:
        return max((s.rev for s in self.steps), default=0)


def conversation_turns(conversation: Conversation) -> list[Turn]:
    tasks = {
        t.pk: t
        for t in conversation.tasks.select_related("agent", "owner").prefetch_related(
            Prefetch("steps", queryset=Step.objects.order_by("seq"))
        )
    }
    turns: list[Turn] = []
    by_task: dict[Any, Turn] = {}
    for message in conversation.messages.all():
        if message.role == Message.Role.USER:
            task = tasks.get(message.task_id)
            turn = Turn(message, task, list(task.steps.all()) if task else [])
            turns.append(turn)
            if task is not None:
                by_task[task.pk] = turn
        elif message.task_id in by_task:
            by_task[message.task_id].reply = message
    return turns


#: Conversations the chat's list shows at first, and how many more a click adds.
LISTED_CONVERSATIONS = 100


def _listed(request: HttpRequest) -> int:
    """How many conversations to list: ``?conversations=N``, at least 100 (the
    page's "Show older conversations" link asks for 100 more each time)."""
    try:
        wanted = int(request.GET.get("conversations", LISTED_CONVERSATIONS))
    except ValueError:
        wanted = LISTED_CONVERSATIONS
    return max(LISTED_CONVERSATIONS, wanted)


@login_required
def chat(request: HttpRequest, conversation_id: Any = None) -> HttpResponse:
    listed = _listed(request)
    conversations = list(
        selectors.own_conversations(request.user).order_by("-updated_at")[: listed + 1]
    )
    # One more than shown was read: whether "older conversations" leads anywhere.
    older = len(conversations) > listed
    conversations = conversations[:listed]
    conversation = None
    if conversation_id is not None:
        conversation = selectors.own_conversation(request.user, conversation_id)
        if conversation is None:
            raise Http404("No such conversation.")
    agent = (
        conversation.agent if conversation else selectors.default_agent(request.user)
    )
    usable = agent is not None and may_use_agent(request.user, agent)
    turns = conversation_turns(conversation) if conversation else []
    active = next(
        (t.task for t in reversed(turns) if t.task and not t.task.is_final), None
    )
    queued = (
        list(
            conversation.queued_messages.filter(
                state=QueuedMessage.State.QUEUED
            ).order_by("created_at", "id")
        )
        if conversation is not None and active is not None
        else []
    )
    refuses = (
        conversation.on_busy == Conversation.OnBusy.REFUSE if conversation else False
    )
    return render(
        request,
        "runs/chat.html",
        {
            "conversations": conversations,
            "older_conversations": listed + LISTED_CONVERSATIONS if older else None,
            "conversation": conversation,
            "turns": turns,
            "agent": agent,
            "agents": usable_agents(request.user).order_by("name"),
            "agent_usable": usable,
            "offered_tools": (
                offered_tools_now(agent, request.user) if agent and usable else []
            ),
            "active_task": active,
            # A busy conversation that queues keeps its message box open.
            "composer_locked": active is not None and refuses,
            "queued_messages": queued,
            # The user's daily budget, when one applies (what the composer says).
            "budget": budget_status(user=request.user) if agent and usable else None,
        },
    )


@login_required
@post_only("chat")
def conversation_new(request: HttpRequest) -> HttpResponse:
    name = request.POST.get("agent", "")
    agent = (
        Agent.objects.filter(name=name).first()
        if name
        else selectors.default_agent(request.user)
    )
    if agent is None:
        raise Http404("No agent is configured.")
    if not may_use_agent(request.user, agent):
        raise PermissionDenied(f"You may not use the agent '{agent.name}'.")
    # A conversation nobody wrote in yet is new enough: clicking New chat again
    # does not leave another empty one in the list.
    conversation = selectors.own_conversations(request.user).filter(
        agent=agent, messages__isnull=True
    ).order_by("-created_at").first() or runs.conversation_create(
        owner=request.user, agent=agent
    )
    return redirect("conversation", conversation_id=conversation.pk)
