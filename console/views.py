"""The console pages: the board, its live partial, and the operators' actions.

The page and its refresh render the same partial (``console/_board.html``) from
the same presenter (:func:`console.board.console_board`); ``static/js/console.js``
fetches the partial every few seconds. Actions are plain POST forms (CSRF), each
redirecting back to the board with what happened.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from console import services
from console.board import RunState, console_board
from console.permissions import can_operate_console, can_view_console
from infra.views import post_only, template_enum
from runs.models import Task

#: How often the page fetches its board again (milliseconds).
REFRESH_MS = 3000
#: The most runs one bulk cancel takes.
MAX_BULK = 200


def _watcher(request: HttpRequest) -> None:
    if not can_view_console(request.user):
        raise PermissionDenied("The console is for operators.")


def _operator(request: HttpRequest) -> None:
    if not can_operate_console(request.user):
        raise PermissionDenied("Only operators act on runs from the console.")


def _board(request: HttpRequest, template: str) -> HttpResponse:
    """``template`` rendered with the board, for those who may watch it."""
    _watcher(request)
    context = {
        "board": console_board(),
        "can_operate": can_operate_console(request.user),
        "refresh_ms": REFRESH_MS,
        "states": template_enum(RunState),
    }
    return render(request, template, context)


@login_required
@require_GET
@never_cache
def console_page(request: HttpRequest) -> HttpResponse:
    return _board(request, "console/console.html")


@login_required
@require_GET
@never_cache
def console_board_partial(request: HttpRequest) -> HttpResponse:
    """The board alone: what the page's script swaps in without a reload."""
    return _board(request, "console/_board.html")


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def _operated_task(request: HttpRequest, task_id: Any) -> Task:
    """The run an operator acts on: 403 for anyone else, 404 when there is none."""
    _operator(request)
    task = Task.objects.select_related("conversation").filter(pk=task_id).first()
    if task is None:
        raise Http404("No such run.")
    return task


def _refused(request: HttpRequest, reason: str) -> HttpResponse:
    """Back to the board, saying why the action was not taken."""
    messages.error(request, reason)
    return redirect("console")


def _done(request: HttpRequest, what: str) -> HttpResponse:
    """Back to the board, saying what the action did."""
    messages.success(request, what)
    return redirect("console")


@login_required
@post_only("console")
def console_cancel(request: HttpRequest) -> HttpResponse:
    """Cancel the runs named by ``task`` (one or many: the bulk form sends several)."""
    _operator(request)
    ids = [_uuid(value) for value in request.POST.getlist("task")[:MAX_BULK]]
    tasks = list(Task.objects.filter(pk__in=[i for i in ids if i is not None]))
    if not tasks:
        messages.warning(request, "Select the runs to cancel.")
        return redirect("console")
    outcome = services.console_cancel(tasks=tasks, user=request.user)
    if outcome.cancelled:
        messages.success(
            request,
            f"Cancelled {len(outcome.cancelled)} run"
            f"{'s' if len(outcome.cancelled) != 1 else ''} (a running one stops at "
            "its next step).",
        )
    if outcome.final:
        messages.warning(
            request,
            f"{len(outcome.final)} had already finished: "
            + ", ".join(f"{str(t.pk)[:8]} ({t.status})" for t in outcome.final),
        )
    return redirect("console")


@login_required
@post_only("console")
def console_requeue(request: HttpRequest, task_id: Any) -> HttpResponse:
    task = _operated_task(request, task_id)
    try:
        services.console_requeue(task=task, user=request.user)
    except services.ConsoleError as exc:
        return _refused(request, str(exc))
    return _done(
        request, f"Re-queued run {str(task.pk)[:8]}: the next free worker takes it."
    )


@login_required
@post_only("console")
def console_retry(request: HttpRequest, task_id: Any) -> HttpResponse:
    task = _operated_task(request, task_id)
    try:
        from_seq = int(request.POST.get("from_seq", ""))
    except ValueError:
        return _refused(request, "Choose the step to retry from.")
    try:
        retry = services.console_retry(task=task, user=request.user, from_seq=from_seq)
    except services.ConsoleError as exc:
        return _refused(request, str(exc))
    return _done(
        request,
        f"Retrying run {str(task.pk)[:8]} from step {from_seq} in its conversation "
        f"as run {str(retry.pk)[:8]}.",
    )
