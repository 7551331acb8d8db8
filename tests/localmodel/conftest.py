"""The real local model server, started once per session when it is installed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.local_model import local_model_server, skip_reason


@pytest.fixture(scope="session")
def local_model_url() -> Iterator[str]:
    """The ``/v1`` URL of the real local model server (skipped when not installed)."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with local_model_server() as url:
        yield url
