"""The Celery app: broker Redis, threads pool, beat schedule for reapers."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

from celery import Celery
from celery.signals import worker_ready, worker_shutdown
from django.conf import settings

from engine.model_client import ModelError
from infra.runtime import model_client, redis_client
from reach_site.schedule import add_schedule

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reach_site.settings")

app = Celery("reach_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(
    [
        "runs",
        "effects",
        "approvals",
        "feedback",
        "traces",
        "memory",
        "notify",
        "automations",
    ]
)


@app.on_after_finalize.connect
def _schedule(sender: Celery, **_: object) -> None:
    add_schedule(sender, reaper_interval_s=settings.REACH_REAPER_INTERVAL_S)


#: Workers announce themselves here; /healthz and `manage.py doctor` count them.
WORKER_KEY_PREFIX = "reach:worker:"
WORKER_HEARTBEAT_EVERY_S = 20.0
WORKER_HEARTBEAT_TTL_S = 60

log = logging.getLogger(__name__)
_heartbeats: dict[str, threading.Event] = {}


def worker_heartbeat_start(
    hostname: str,
    *,
    every_s: float = WORKER_HEARTBEAT_EVERY_S,
    ttl_s: int = WORKER_HEARTBEAT_TTL_S,
) -> threading.Event:
    """Set ``reach:worker:<hostname>`` (expiring after ``ttl_s``) every ``every_s``.

    Runs on a daemon thread until the returned event is set; a worker that dies
    stops beating and its key expires on its own.
    """
    stop = threading.Event()
    key = WORKER_KEY_PREFIX + hostname

    def beat() -> None:
        while True:
            try:
                redis_client().set(key, str(int(time.time())), ex=ttl_s)
            except Exception:  # noqa: BLE001 - Redis may blink; beat again later
                log.warning("worker heartbeat failed", exc_info=True)
            if stop.wait(every_s):
                break
        try:
            redis_client().delete(key)
        except Exception:  # noqa: BLE001
            log.warning("could not remove the worker heartbeat", exc_info=True)

    previous = _heartbeats.pop(hostname, None)
    if previous is not None:
        previous.set()
    _heartbeats[hostname] = stop
    threading.Thread(target=beat, name="reach-worker-heartbeat", daemon=True).start()
    return stop


@worker_ready.connect
def _start_worker_heartbeat(sender: Any = None, **_: object) -> None:
    hostname = getattr(sender, "hostname", None) or socket.gethostname()
    worker_heartbeat_start(str(hostname))


@worker_ready.connect
def _build_model_client(**_: object) -> None:
    """Build the model client (and import the openai SDK, about 1.4 s) when the
    worker starts, not inside the first run it is given."""
    try:
        model_client()
    except ModelError as exc:
        # The runs report it where the user sees it; here it is only a warning.
        log.warning("no model client yet: %s", exc)


@worker_shutdown.connect
def _stop_worker_heartbeats(**_: object) -> None:
    for stop in list(_heartbeats.values()):
        stop.set()
