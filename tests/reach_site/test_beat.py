"""The light beat (``reach_site.beat``): the same schedule, without Django's apps."""

from __future__ import annotations

from tests.support.probes import probe

PROBE = """
import json, sys
import reach_site.beat as beat
beat.app.loader.import_default_modules()
beat.app.finalize()
schedule = {
    name: [entry["task"], entry["schedule"]]
    for name, entry in beat.app.conf.beat_schedule.items()
}
print(json.dumps({
    "schedule": schedule,
    "apps_loaded": "django.apps.registry" in sys.modules,
    "models_loaded": any(m.endswith(".models") for m in sys.modules if m.split(".")[0]
                         in ("runs", "registry", "approvals", "traces", "effects")),
    "queue": beat.app.conf.task_default_queue,
    "broker": beat.app.conf.broker_url,
}))
"""


def test_the_light_beat_sends_the_django_apps_schedule_without_loading_the_apps(
    tmp_path,
):
    from django.conf import settings

    from reach_site.celery import app

    app.finalize()
    expected = {
        name: [entry["task"], entry["schedule"]]
        for name, entry in app.conf.beat_schedule.items()
    }
    env = {
        "PATH": "/usr/bin:/bin",
        "REACH_VAR_DIR": str(tmp_path),
        "REDIS_URL": settings.CELERY_BROKER_URL,
        "REACH_REAPER_INTERVAL_S": str(settings.REACH_REAPER_INTERVAL_S),
    }
    seen = probe(PROBE, env)
    assert seen["schedule"] == expected
    assert {"reap leases", "expire approvals", "dispatch outbox"} <= set(expected)
    assert seen["apps_loaded"] is False and seen["models_loaded"] is False
    assert seen["queue"] == "reach" == settings.CELERY_TASK_DEFAULT_QUEUE
    assert seen["broker"] == settings.CELERY_BROKER_URL
