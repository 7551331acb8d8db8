"""Fixtures of the effects tests: a real SMTP server the dispatcher sends to."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support.smtp_server import LocalSMTP, use_smtp


@pytest.fixture
def smtp(settings: Any) -> Iterator[Callable[..., LocalSMTP]]:
    """``smtp(hold_first=..., silent=..., timeout=...)`` -> a started
    :class:`LocalSMTP` that Django's mail now goes to."""
    servers: list[LocalSMTP] = []

    def start(timeout: float | None = 5.0, **options: Any) -> LocalSMTP:
        server = LocalSMTP(**options).start()
        servers.append(server)
        use_smtp(settings, server, timeout=timeout)
        return server

    yield start
    for server in servers:
        server.stop()
