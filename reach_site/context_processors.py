from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest


def reach(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    return {
        "reach_model": settings.OPENAI_MODEL,
        "reach_local_model": settings.LOCAL_MODEL,
        "can_approve": bool(
            user.is_authenticated and user.has_perm("approvals.decide_approval")
        ),
        "can_audit": bool(user.is_authenticated and user.has_perm("runs.audit_task")),
    }
