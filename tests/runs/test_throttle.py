"""The API throttle: one limit across web processes, kept in the shared Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from infra import runtime
from tests.support.ports import free_port
from tests.support.probes import ROOT, printed_json

#: One "web process": the configured throttle classes, asked ``tries`` times for
#: one user; prints how many requests they allowed.
PROCESS = """
import json, sys
from types import SimpleNamespace
import django
django.setup()
from rest_framework.settings import api_settings
user = SimpleNamespace(is_authenticated=True, pk=4242)
request = SimpleNamespace(user=user, META={"REMOTE_ADDR": "127.0.0.1"})
throttles = [cls() for cls in api_settings.DEFAULT_THROTTLE_CLASSES]
allowed = sum(
    all(t.allow_request(request, None) for t in throttles)
    for _ in range(int(sys.argv[1]))
)
print(json.dumps({"allowed": allowed}))
"""


def web_processes(count: int, tries: int, env: dict[str, str]) -> list[int]:
    """Run ``count`` separate processes at once; -> what each one allowed."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROCESS, str(tries)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    allowed = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        allowed.append(printed_json(out)["allowed"])
    return allowed


def test_two_web_processes_share_one_limit(bundled_redis, flush_redis, tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "reach_site.settings",
        "REDIS_URL": bundled_redis.url,
        "REACH_API_RATE": "7/min",
        "REACH_VAR_DIR": str(tmp_path),
        "DJANGO_SECRET_KEY": "throttle-test",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'unused.sqlite3'}",
        "REACH_LOG_LEVEL": "ERROR",
    }
    allowed = web_processes(2, 10, env)
    # Per-process memory would allow 7 in each; one shared window allows 7 in all.
    assert sum(allowed) == 7, allowed


def api_rate(settings: Any, rate: str) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"user": rate},
    }


@pytest.mark.django_db
def test_past_the_rate_the_api_answers_429_with_retry_after(
    alice, api_client_for, settings, flush_redis
):
    api_rate(settings, "3/min")
    client = api_client_for(alice)
    codes = [client.get("/api/agents/").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    refused = client.get("/api/agents/")
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 60
    assert "throttled" in refused.json()["error"].lower()


@pytest.mark.django_db
def test_the_throttle_lets_requests_through_while_redis_is_unreachable(
    alice, api_client_for, settings
):
    api_rate(settings, "1/min")
    client = api_client_for(alice)
    shared = settings.REDIS_URL
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    runtime.redis_client.cache_clear()
    try:
        codes = [client.get("/api/agents/").status_code for _ in range(3)]
    finally:
        # The cached client must point at the shared server again.
        settings.REDIS_URL = shared
        runtime.redis_client.cache_clear()
    assert codes == [200, 200, 200]
