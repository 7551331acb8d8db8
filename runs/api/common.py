"""404 for the tasks and conversations that belong to someone else (what every
JSON API view shares, pages, redaction and errors, is ``infra.api.common``)."""

from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework.request import Request

from runs import selectors
from runs.models import Conversation, Task


def visible_task_or_404(request: Request, task_id: Any, *, brief: bool = False) -> Task:
    """The task if the caller may read it; 404 for others' tasks and unknown ids.
    ``brief``: with only what its payload shows (:func:`selectors.visible_task`)."""
    task = selectors.visible_task(request.user, task_id, brief=brief)
    if task is None:
        raise Http404
    return task


def own_conversation_or_404(request: Request, conversation_id: Any) -> Conversation:
    """The caller's own conversation; 404 for anyone else's and unknown ids."""
    conversation = selectors.own_conversation(request.user, conversation_id)
    if conversation is None:
        raise Http404
    return conversation
