"""The fixed cast and the servers the tests need (fixtures only: the helpers are
in ``tests.support``).

alice (chat user who owns things), bob (another chat user), operator (approver and
auditor) and admin; the bundled Redis on a free port for the whole session; the
scripted OpenAI-compatible model server on loopback; the stack of real processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.cast import PASSWORD
from tests.support.redis_server import BundledRedis
from tests.support.stack import Stack

#: The ``browser`` fixture (Debian's Chromium through Playwright),
#: ``local_server`` (loopback HTTP servers, for the registry and fuzz tests) and
#: ``oidc_provider`` (a local OpenID provider, for the single sign-on tests).
pytest_plugins = [
    "tests.support.browser",
    "tests.support.http_servers",
    "tests.support.oidc_provider",
]


@pytest.fixture(scope="session", autouse=True)
def bundled_redis() -> Iterator[BundledRedis]:
    """Point every Redis user (Celery, Channels, caches) at a private server."""
    from django.conf import settings

    server = BundledRedis().start()
    settings.REDIS_URL = server.url
    settings.CELERY_BROKER_URL = server.url
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [server.url], "prefix": "reach"},
        }
    }
    settings.REACH_DEMO_PASSWORD = PASSWORD
    # Password hashing is deliberately slow; tests create many users.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    from reach_site.celery import app

    app.conf.broker_url = server.url
    # Clients made before the settings changed point at no server: drop them.
    from channels.layers import channel_layers

    from infra import runtime

    runtime.redis_client.cache_clear()
    channel_layers.backends.clear()
    yield server
    from runs import counters

    counters.flush()  # before the server goes: nothing is left to send to it
    server.stop()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix: None,
) -> None:
    """Close every connection and pool opened before the test database exists.

    Django's ``create_test_db`` renames the database in the settings but closes
    a PostgreSQL pool only when it clones or drops one: a pool opened earlier (a
    module that asks the WSGI application for its schema at import, as the API
    fuzz does) would keep handing out connections to the real database, while
    subprocesses and ``pg_dump`` use the test one.
    """
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        conn.close()
        close_pool = getattr(conn, "close_pool", None)
        if close_pool is not None:
            close_pool()


@pytest.fixture(scope="session", autouse=True)
def close_database_pools(
    django_db_setup: Any, django_db_blocker: Any
) -> Iterator[None]:
    """Close pooled connections (PostgreSQL) before the test database is dropped."""
    yield
    from django.db import connections

    for conn in connections.all():
        close_pool = getattr(conn, "close_pool", None)
        if close_pool is not None:
            close_pool()


@pytest.fixture
def flush_redis(bundled_redis: BundledRedis) -> Iterator[None]:
    from infra.runtime import redis_client
    from runs import counters

    # Counts an earlier test's runs left pending would land after the flush.
    counters.flush()
    redis_client().flushdb()
    yield
    counters.flush()
    redis_client().flushdb()


@pytest.fixture
def demo(django_db_blocker: Any) -> SimpleNamespace:
    """The demo seed: users, tools, notes and the assistant agent."""
    from django.contrib.auth import get_user_model

    from reach_site.demo import seed_demo
    from registry.models import Agent

    seed_demo()
    users = get_user_model().objects
    return SimpleNamespace(
        alice=users.get(username="alice"),
        bob=users.get(username="bob"),
        operator=users.get(username="operator"),
        admin=users.get(username="admin"),
        agent=Agent.objects.get(name="assistant"),
        password=PASSWORD,
    )


def _cast_member(fixture: str, seeded: str) -> Any:
    """The fixture ``fixture``: the seeded user ``demo.<seeded>``."""

    @pytest.fixture(name=fixture)
    def member(demo: SimpleNamespace) -> Any:
        return getattr(demo, seeded)

    return member


alice = _cast_member("alice", "alice")
bob = _cast_member("bob", "bob")
operator = _cast_member("operator", "operator")
admin_user = _cast_member("admin_user", "admin")


@pytest.fixture
def api_client_for() -> Callable[[Any], Any]:
    """``api_client_for(user)`` -> an APIClient holding a real bearer token."""
    from tests.support.clients import bearer_client

    return bearer_client


@pytest.fixture
def model(use_model: Any) -> Iterator[Any]:
    """``model(handler)`` starts a scripted model server the product talks to."""
    from tests.support.scripted_model import ScriptedModel

    servers: list[Any] = []

    def start(handler: Any) -> Any:
        server = ScriptedModel(handler).start()
        servers.append(server)
        use_model(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def use_model(settings: Any) -> Any:
    """``use_model(server)`` points the product at a scripted model server."""

    def point(server: Any) -> Any:
        settings.OPENAI_BASE_URL = server.base_url
        settings.OPENAI_API_KEY = "test-key"
        settings.OPENAI_MODEL = "scripted-model"
        settings.REACH_MODEL_MAX_RETRIES = 1
        return server

    return point


@pytest.fixture
def stack(
    transactional_db: Any, bundled_redis: BundledRedis, tmp_path: Path, settings: Any
) -> Iterator[Stack]:
    """Environment for subprocesses sharing this test's database and Redis."""
    from django.db import connection

    db_name = connection.settings_dict["NAME"]
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{db_name}",
        "REDIS_URL": bundled_redis.url,
        "REACH_VAR_DIR": str(tmp_path),
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,
        "OPENAI_API_KEY": "test-key",
        "OPENAI_MODEL": "scripted-model",
        "REACH_LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("OPENAI_BASE_URL", None)
    stack = Stack(env=env, redis=bundled_redis)
    try:
        yield stack
    finally:
        stack.stop()
        from infra.runtime import redis_client

        redis_client().flushdb()
