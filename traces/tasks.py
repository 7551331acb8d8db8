from __future__ import annotations

from celery import shared_task


@shared_task(name="traces.purge")
def purge() -> int:
    from traces.services import traces_purge

    return traces_purge()
