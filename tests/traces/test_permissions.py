"""Who may see and do what on every trace page and endpoint.

alice owns the run; bob is another chat user (her objects are 404 to him);
operator is an auditor (everything); admin is a superuser; anonymous callers
are sent to the login page (pages) or get 401 (API).
"""

from __future__ import annotations

import re

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.support.clients import logged_in, trace_of

pytestmark = pytest.mark.django_db(transaction=True)

# (method, path, body) -> expected status for anonymous, alice, bob, operator, admin.
MATRIX = [
    ("page", "/traces/", None, (302, 200, 200, 200, 200)),
    ("page", "/traces/{task}/", None, (302, 200, 404, 200, 200)),
    ("page", "/traces/stats/", None, (302, 200, 200, 200, 200)),
    ("get", "/api/tasks/{task}/trace/", None, (401, 200, 404, 200, 200)),
    ("post", "/api/tasks/{task}/rerun/", None, (401, 200, 404, 200, 200)),
    ("post", "/api/tasks/{task}/fork/", {"from_seq": 3}, (401, 202, 404, 202, 202)),
    ("post", "/api/traces/import/", "document", (401, 403, 403, 201, 201)),
    ("get", "/api/audit/", None, (401, 403, 403, 200, 200)),
]
WHO = ("anonymous", "alice", "bob", "operator", "admin")


@pytest.fixture
def recorded(redis_task, alice, api_client_for):
    """alice's run of the demo question and the trace document she exported."""
    document = trace_of(api_client_for(alice), redis_task.pk)
    return redis_task, document


@pytest.mark.parametrize("method, path, body, expected", MATRIX)
def test_the_permission_matrix(
    method, path, body, expected, recorded, demo, api_client_for
):
    task, document = recorded
    url = path.format(task=task.pk)
    for who, status in zip(WHO, expected, strict=True):
        user = getattr(demo, who, None)
        if method == "page":
            client = logged_in(user) if user else Client()
            response = client.get(url)
            if status == 302:
                assert response["Location"].startswith("/accounts/login/"), who
        else:
            client = api_client_for(user) if user else APIClient()
            payload = document if body == "document" else body
            response = getattr(client, method)(url, payload, format="json")
        assert response.status_code == status, f"{who} {method} {url}"


def test_bob_sees_neither_alices_run_nor_her_numbers(recorded, bob, alice):
    task, _ = recorded
    listing = logged_in(bob).get("/traces/").content.decode()
    assert str(task.pk) not in listing
    assert "0 runs" in listing
    stats = logged_in(bob).get("/traces/stats/").content.decode()
    assert "search_notes" not in stats
    assert "search_notes" in logged_in(alice).get("/traces/stats/").content.decode()


def test_a_browser_session_needs_the_csrf_token_to_post(recorded, alice):
    task, _ = recorded
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    html = client.get(f"/traces/{task.pk}/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)

    url = f"/api/tasks/{task.pk}/rerun/"
    refused = client.post(url, "{}", content_type="application/json")
    accepted = client.post(
        url, "{}", content_type="application/json", HTTP_X_CSRFTOKEN=token
    )

    assert refused.status_code == 403
    assert accepted.status_code == 200 and accepted.json()["matches"] is True


def test_the_trace_pages_send_no_inline_script(recorded, alice):
    task, _ = recorded
    for url in ("/traces/", f"/traces/{task.pk}/", "/traces/stats/"):
        response = logged_in(alice).get(url)
        policy = response["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        html = response.content.decode()
        for tag in re.findall(r"<script[^>]*>", html):
            assert "src=" in tag or 'type="application/json"' in tag, tag
        assert " style=" not in html
