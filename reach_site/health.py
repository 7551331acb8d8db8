"""``/healthz``: database and Redis answer; never calls the model."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from infra.runtime import redis_client


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    result: dict[str, object] = {"status": "ok", "database": "ok", "redis": "ok"}
    failing = []
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001
        result["database"] = f"error: {exc.__class__.__name__}"
        failing.append("database")
    workers = 0
    try:
        client = redis_client()
        client.ping()
        workers = _count_workers(client)
    except Exception as exc:  # noqa: BLE001
        result["redis"] = f"error: {exc.__class__.__name__}"
        failing.append("redis")
    result["workers"] = workers
    if failing:
        result["status"] = "error"
        result["failing"] = failing
        return JsonResponse(result, status=503)
    return JsonResponse(result)


def _count_workers(client: object) -> int:
    """Workers that beat in the last minute (they write reach:worker:<id>)."""
    # SCAN, not KEYS: KEYS blocks a busy production Redis.
    keys = client.scan_iter(match="reach:worker:*", count=100)  # type: ignore[attr-defined]
    return sum(1 for _ in keys)
