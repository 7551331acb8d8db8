"""Settings that must hold together on PostgreSQL."""

from __future__ import annotations

import os

import pytest

from tests.support.probes import ROOT, probe


def _pool(**env: str) -> dict[str, int]:
    """The pool options settings give a process started with ``env``."""
    child = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REACH_", "DATABASE_URL"))
    }
    child.update(
        DATABASE_URL="postgres://reach@127.0.0.1:5432/reach",
        DJANGO_SETTINGS_MODULE="reach_site.settings",
        REACH_VAR_DIR=os.environ.get("REACH_VAR_DIR", str(ROOT / "var")),
        **env,
    )
    code = (
        "import json; from django.conf import settings; "
        "print(json.dumps(settings.DATABASES['default']['OPTIONS']['pool']))"
    )
    return probe(code, child)


def test_the_pool_covers_every_worker_thread_by_default():
    # 200 threads against a pool of 20 made runs fail with PoolTimeout.
    assert _pool(REACH_WORKER_CONCURRENCY="200")["max_size"] >= 200
    assert _pool()["max_size"] >= 64


def test_an_explicit_pool_size_wins():
    assert (
        _pool(REACH_WORKER_CONCURRENCY="200", REACH_DB_POOL_MAX="30")["max_size"] == 30
    )


@pytest.mark.django_db
def test_an_sqlite_connection_is_wal_with_a_small_page_cache():
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("the embedded database's settings")
    with connection.cursor() as cursor:
        pragmas = {
            name: cursor.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("journal_mode", "synchronous", "cache_size")
        }
    # synchronous 1 is NORMAL; a negative cache_size is in KiB.
    assert pragmas == {"journal_mode": "wal", "synchronous": 1, "cache_size": -512}
