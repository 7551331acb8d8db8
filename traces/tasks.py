from __future__ import annotations

from celery import shared_task

from traces.services import traces_purge


@shared_task(name="traces.purge")
def purge() -> int:
    return traces_purge()
