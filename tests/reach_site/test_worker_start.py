"""A worker builds its model client when it starts, not inside its first run."""

from __future__ import annotations

from typing import Any

import pytest

import infra.runtime
from reach_site import celery as reach_celery


@pytest.fixture
def no_client(monkeypatch: Any) -> None:
    monkeypatch.setattr(infra.runtime, "_model_client", None)
    monkeypatch.setattr(infra.runtime, "_model_key", None)


def test_a_ready_worker_has_its_model_client_built(no_client: None, settings: Any):
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"

    reach_celery._build_model_client()

    built = infra.runtime._model_client
    assert built is not None
    assert built.base_url == "http://127.0.0.1:9/v1"
    assert infra.runtime.model_client() is built  # the runs get that very client


def test_a_worker_without_an_endpoint_still_starts(
    no_client: None, settings: Any, caplog: Any
):
    settings.OPENAI_BASE_URL = ""

    reach_celery._build_model_client()

    assert infra.runtime._model_client is None
    assert "no model client yet" in caplog.text
    assert "OPENAI_BASE_URL" in caplog.text
