"""Clients the way users come: a browser session, a bearer token, a decision."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client
from rest_framework.test import APIClient

from runs.api.auth import token_issue


def bearer_token(user: Any, name: str = "test") -> str:
    """A real API token of ``user`` (the key, as the client sends it)."""
    _, key = token_issue(user=user, name=name)
    return key


def bearer_headers(user: Any, name: str = "test") -> dict[str, str]:
    """``{"Authorization": "Bearer <a real token of user>"}``, for raw HTTP."""
    return {"Authorization": f"Bearer {bearer_token(user, name)}"}


def bearer_client(user: Any, name: str = "test") -> APIClient:
    """An ``APIClient`` sending ``Authorization: Bearer <a real token of user>``."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {bearer_token(user, name)}")
    return client


def post_json(client: Any, url: str, body: Any) -> Any:
    """POST ``body`` as JSON text encoded here: bytes as they are, anything else
    through ``json.dumps``, whose ASCII escapes carry lone surrogates as a client
    would send them (the test client's own encoder cannot)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.generic("POST", url, data, content_type="application/json")


def logged_in(user: Any, **options: Any) -> Client:
    """A test ``Client`` with ``user``'s session (``options`` go to ``Client``)."""
    client = Client(**options)
    client.force_login(user)
    return client


def session_cookie(user: Any) -> str:
    """The value of a ``sessionid`` cookie logged in as ``user``."""
    return logged_in(user).cookies["sessionid"].value


def decision_url(approval: Any) -> str:
    return f"/api/approvals/{approval.pk}/decision/"


def post_decision(client: Any, approval: Any, **body: Any) -> Any:
    """POST ``body`` (``decision``, ``arguments``, ``reason``) as the decision."""
    return client.post(decision_url(approval), body, format="json")


def task_of(client: Any, task_id: Any) -> dict[str, Any]:
    """The task as the API shows it (``GET /api/tasks/<id>/``)."""
    return client.get(f"/api/tasks/{task_id}/").json()


def steps_of(client: Any, task_id: Any) -> list[dict[str, Any]]:
    """The task's steps as the API lists them (``GET /api/tasks/<id>/steps/``)."""
    return client.get(f"/api/tasks/{task_id}/steps/").json()["steps"]


def trace_of(client: Any, task_id: Any) -> dict[str, Any]:
    """The exported trace document of a task (``GET /api/tasks/<id>/trace/``)."""
    return client.get(f"/api/tasks/{task_id}/trace/").json()


def import_trace(client: Any, document: Any) -> Any:
    """``POST /api/traces/import/`` with ``document``."""
    return client.post("/api/traces/import/", document, format="json")


def fork(client: Any, task: Any, **body: Any) -> Any:
    """``POST /api/tasks/<id>/fork/`` with ``body`` (``from_seq``, ``arguments``...)."""
    return client.post(f"/api/tasks/{task.pk}/fork/", body, format="json")


def post_message(client: Any, conversation_id: Any, content: str) -> Any:
    """``POST /api/conversations/<id>/messages/``: a new message, a new run."""
    return client.post(
        f"/api/conversations/{conversation_id}/messages/",
        {"content": content},
        format="json",
    )
