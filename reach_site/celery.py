"""The Celery app: broker Redis, threads pool, beat schedule for reapers."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reach_site.settings")

app = Celery("reach_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["agents", "approvals", "traces"])


@app.on_after_finalize.connect
def _schedule(sender: Celery, **_: object) -> None:
    from django.conf import settings

    every = settings.REACH_REAPER_INTERVAL_S
    sender.add_periodic_task(every, sender.signature("agents.reap"), name="reap leases")
    sender.add_periodic_task(
        every, sender.signature("approvals.expire"), name="expire approvals"
    )
    sender.add_periodic_task(
        30.0, sender.signature("agents.dispatch_outbox"), name="dispatch outbox"
    )
    sender.add_periodic_task(
        3600.0, sender.signature("traces.purge"), name="purge old traces"
    )
