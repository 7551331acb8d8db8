"""The Memory page (``/memory/``): what the agent remembers about the user.

List and search, add, correct (text, subject, expiry) and delete; the history
(superseded and forgotten items) on request. Each user sees their own items
only; admins manage agents' memory in the admin. Forms post and redirect back
(no script): every change goes through the services, audited.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone

from infra.views import post_only
from memory import services
from memory.models import MemoryItem
from memory.permissions import can_manage_agent_memory

PAGE_ITEMS = 200


@dataclass
class MemoryPage:
    """Everything the page shows, computed once."""

    items: list[MemoryItem]
    query: str = ""
    history: bool = False
    can_manage_agents: bool = False
    states: dict[str, int] = field(default_factory=dict)
    max_subject: int = services.MAX_SUBJECT_CHARS
    max_text: int = services.MAX_TEXT_CHARS
    max_days: int = services.MAX_DAYS

    @property
    def tainted(self) -> int:
        return sum(1 for item in self.items if item.tainted)


@login_required
def memory_list(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()[:200]
    history = request.GET.get("history") in ("1", "on", "true")
    items = list(
        services.memory_list(
            user=request.user, query=query, history=history, limit=PAGE_ITEMS
        )[:PAGE_ITEMS]
    )
    states: dict[str, int] = {}
    for item in items:
        states[item.state] = states.get(item.state, 0) + 1
    page = MemoryPage(
        items=items,
        query=query,
        history=history,
        can_manage_agents=can_manage_agent_memory(request.user),
        states=states,
    )
    return render(request, "memory/list.html", {"page": page})


def _back(request: HttpRequest) -> HttpResponse:
    """Back to the list as it was (its search and history toggle)."""
    params = {k: v for k in ("q", "history") if (v := request.POST.get(k, "").strip())}
    url = reverse("memory")
    return redirect(f"{url}?{urlencode(params)}" if params else url)


def _expiry(request: HttpRequest) -> Any:
    """The expiry the form asks for: a date (end of that day, UTC), or None."""
    raw = request.POST.get("expires", "").strip()
    if not raw:
        return None
    try:
        day = dt.date.fromisoformat(raw)
    except ValueError as exc:
        raise services.MemoryInvalid("The expiry is a date (YYYY-MM-DD).") from exc
    if day < timezone.now().date():
        raise services.MemoryInvalid("The expiry is today or later.")
    return dt.datetime.combine(day, dt.time(23, 59, 59), tzinfo=dt.UTC)


@login_required
@post_only("memory")
def memory_add(request: HttpRequest) -> HttpResponse:
    try:
        days = request.POST.get("days", "").strip()
        services.memory_write(
            scope=MemoryItem.Scope.USER,
            user=request.user,
            subject=request.POST.get("subject", ""),
            text=request.POST.get("text", ""),
            expires_at=services.expiry_in(int(days)) if days.isdigit() else None,
            source=services.Source.person(request.user),
        )
    except services.MemoryInvalid as exc:
        messages.error(request, f"Not saved: {exc}")
    else:
        messages.success(request, "Saved.")
    return _back(request)


def _own(request: HttpRequest, memory_id: Any) -> MemoryItem:
    item = services.visible_item(request.user, memory_id)
    if item is None or item.scope != MemoryItem.Scope.USER:
        raise Http404("No such memory item.")
    return item


@login_required
@post_only("memory")
def memory_edit(request: HttpRequest, memory_id: Any) -> HttpResponse:
    item = _own(request, memory_id)
    try:
        services.memory_update(
            item=item,
            actor=request.user,
            text=request.POST.get("text", item.text),
            subject=request.POST.get("subject", item.subject),
            expires_at=_expiry(request),
        )
    except services.MemoryInvalid as exc:
        messages.error(request, f"Not changed: {exc}")
    except MemoryItem.DoesNotExist as exc:  # deleted meanwhile
        raise Http404("No such memory item.") from exc
    else:
        messages.success(request, "Changed.")
    return _back(request)


@login_required
@post_only("memory")
def memory_delete(request: HttpRequest, memory_id: Any) -> HttpResponse:
    item = _own(request, memory_id)
    try:
        deleted = services.memory_delete(item=item, actor=request.user)
    except MemoryItem.DoesNotExist as exc:  # deleted meanwhile
        raise Http404("No such memory item.") from exc
    messages.success(
        request,
        "Deleted."
        if len(deleted) == 1
        else f"Deleted with {len(deleted) - 1} older version(s).",
    )
    return _back(request)
