from __future__ import annotations

from celery import shared_task


@shared_task(name="approvals.expire")
def expire() -> int:
    from approvals.services import approvals_expire

    return approvals_expire()
