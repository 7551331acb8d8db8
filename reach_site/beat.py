"""Celery beat without Django: ``celery -A reach_site.beat beat``.

Beat only sends task messages by name on a timer; it needs the broker's
settings and the schedule, not the apps. The Django-configured app
(``reach_site.celery``) would load every app, model and library (about 120 MB)
into a process that runs a clock. This one reads the same settings module as
plain Python (the environment, parsed once, no app loading) with Celery's Django
fixup off, and adds the same schedule (:mod:`reach_site.schedule`): about a third
of the memory. ``celery -A reach_site beat`` still works, as before.
"""

from __future__ import annotations

from celery import Celery

from reach_site import settings
from reach_site.schedule import add_schedule

app = Celery("reach_site", fixups=[])
app.config_from_object(settings, namespace="CELERY")


@app.on_after_finalize.connect
def _schedule(sender: Celery, **_: object) -> None:
    add_schedule(sender, reaper_interval_s=settings.REACH_REAPER_INTERVAL_S)
