"""Celery tasks: thin shells that take ids and call one service."""

from __future__ import annotations

from celery import shared_task

from evals import services
from evals.models import EvalReport

#: A suite can take hours on a slow model; the run limit of ``advance`` is not
#: the driver's (it only waits, starts turns and decides approvals).
DRIVE_TIME_LIMIT_S = 24 * 3600


@shared_task(
    name="evals.drive",
    acks_late=True,
    reject_on_worker_lost=True,
    time_limit=DRIVE_TIME_LIMIT_S,
    soft_time_limit=DRIVE_TIME_LIMIT_S - 60,
)
def drive(report_id: str) -> str:
    report = EvalReport.objects.filter(pk=report_id).first()
    if report is None:
        return "gone"
    return services.report_drive(report, poll_s=0.5).status
