"""The periodic tasks (reapers, expiry, outbox, purges), by task name.

Django-free: both the Django-configured Celery app (``reach_site.celery``) and
the light beat process (``reach_site.beat``) add the same schedule, which names
tasks and never imports them.
"""

from __future__ import annotations

from celery import Celery


def add_schedule(app: Celery, *, reaper_interval_s: float) -> None:
    every = reaper_interval_s
    app.add_periodic_task(every, app.signature("agents.reap"), name="reap leases")
    app.add_periodic_task(
        every, app.signature("approvals.expire"), name="expire approvals"
    )
    app.add_periodic_task(
        60.0, app.signature("approvals.escalate"), name="escalate approvals"
    )
    app.add_periodic_task(
        every, app.signature("agents.reap_queued"), name="start queued messages"
    )
    app.add_periodic_task(
        every, app.signature("automations.tick"), name="fire due schedules"
    )
    app.add_periodic_task(
        30.0, app.signature("agents.dispatch_outbox"), name="dispatch outbox"
    )
    app.add_periodic_task(
        30.0, app.signature("notify.sweep"), name="send notify deliveries"
    )
    app.add_periodic_task(
        3600.0, app.signature("traces.purge"), name="purge old traces"
    )
    app.add_periodic_task(
        60.0, app.signature("feedback.judge_sampled"), name="judge sampled runs"
    )
    app.add_periodic_task(
        3600.0, app.signature("memory.purge"), name="purge old memory"
    )
