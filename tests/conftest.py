"""The fixed cast and the servers the tests need.

alice (chat user who owns things), bob (another chat user), operator (approver and
auditor) and admin; the bundled Redis on a free port for the whole session; the
scripted OpenAI-compatible model server on loopback.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.redis_server import BundledRedis

PASSWORD = "test-password-1234"

#: The ``browser`` fixture (Debian's Chromium through Playwright).
pytest_plugins = ["tests.support.browser"]


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
    _reset_redis_users()
    yield server
    server.stop()


def _reset_redis_users() -> None:
    from channels.layers import channel_layers

    from infra import runtime

    runtime.redis_client.cache_clear()
    channel_layers.backends.clear()


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

    redis_client().flushdb()
    yield
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


@pytest.fixture
def alice(demo: SimpleNamespace) -> Any:
    return demo.alice


@pytest.fixture
def bob(demo: SimpleNamespace) -> Any:
    return demo.bob


@pytest.fixture
def operator(demo: SimpleNamespace) -> Any:
    return demo.operator


@pytest.fixture
def admin_user(demo: SimpleNamespace) -> Any:
    return demo.admin


@pytest.fixture
def api_client_for() -> Any:
    """``api_client_for(user)`` -> an APIClient holding a real bearer token."""
    from rest_framework.test import APIClient

    from runs.api.auth import token_issue

    def make(user: Any) -> APIClient:
        _, key = token_issue(user=user, name="test")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
        return client

    return make


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
