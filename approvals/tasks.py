from __future__ import annotations

from celery import shared_task

from approvals.services import approvals_expire


@shared_task(name="approvals.expire")
def expire() -> int:
    return approvals_expire()
