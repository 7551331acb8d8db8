from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest

from approvals.selectors import approves_anything
from audit.permissions import can_audit
from console.permissions import can_view_console
from evals.services import can_run_evals
from feedback.services import can_review


def reach(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    return {
        "reach_model": settings.OPENAI_MODEL,
        "reach_local_model": settings.LOCAL_MODEL,
        # The composer's maxlength: the same limit task_start enforces.
        "reach_max_message_chars": settings.REACH_MAX_MESSAGE_CHARS,
        # Read only where a page asks (a callable): a route's approver holds no
        # permission, and finding their routes costs a query.
        "can_approve": lambda: approves_anything(user),
        "can_audit": can_audit(user),
        "can_run_evals": can_run_evals(user),
        "can_review": can_review(user),
        "can_view_console": can_view_console(user),
    }
