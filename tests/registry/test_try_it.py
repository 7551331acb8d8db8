"""The admin's Try it page for HTTP tools: reads run once, writes are dry runs."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from registry.models import Tool
from registry.services import tool_save
from tests.support.http_servers import Reply

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "try-it-secret-value-5566"


def save_http_tool(url: str, **fields: Any) -> Tool:
    http = {
        "method": fields.pop("method", "GET"),
        "url": url,
        "allowed_hosts": ["127.0.0.1"],
        "headers": {"Authorization": "Bearer {{secret:TRY_TOKEN}}"},
        "response_fields": ["/order"],
        **fields.pop("http", {}),
    }
    tool = Tool(
        name=fields.pop("name", "lookup_order"),
        description="Look up an order of the shop by its number.",
        parameters={
            "type": "object",
            "properties": {
                "order": {"type": "string", "description": "Order number."},
                "note": {"type": "string", "description": "A note."},
            },
            "required": ["order"],
        },
        kind=Tool.Kind.HTTP,
        http=http,
        **fields,
    )
    return tool_save(tool=tool)[0]


@pytest.fixture
def try_secret(monkeypatch):
    monkeypatch.setenv("REACH_SECRET_TRY_TOKEN", SECRET)


def try_url(tool: Tool) -> str:
    return f"/admin/registry/tool/{tool.pk}/try/"


def test_the_change_form_of_an_http_tool_has_a_try_it_button(client, admin_user):
    tool = save_http_tool("http://127.0.0.1:9/orders/{order}")
    client.force_login(admin_user)
    page = client.get(f"/admin/registry/tool/{tool.pk}/change/").content.decode()
    assert f'href="{try_url(tool)}"' in page
    assert "Try it" in page
    python_tool = Tool.objects.get(name="calculate")
    other = client.get(
        f"/admin/registry/tool/{python_tool.pk}/change/"
    ).content.decode()
    assert "/try/" not in other


def test_the_try_page_offers_sample_arguments_from_the_schema(client, admin_user):
    tool = save_http_tool("http://127.0.0.1:9/orders/{order}")
    client.force_login(admin_user)
    page = client.get(try_url(tool))
    assert page.status_code == 200
    form = page.context["form"]
    assert json.loads(form.initial["arguments"]) == {"order": "", "note": ""}


def test_trying_a_read_sends_it_once_and_shows_request_and_response(
    client, admin_user, local_server, try_secret
):
    server = local_server(
        lambda hit: Reply(
            data={"order": {"id": "A-1", "auth": hit.headers.get("authorization")}}
        )
    )
    tool = save_http_tool(server.url("/orders/{order}"))
    client.force_login(admin_user)
    page = client.post(try_url(tool), {"arguments": '{"order": "A-1"}'})
    assert page.status_code == 200
    html = page.content.decode()
    assert len(server.hits) == 1
    assert server.hits[0].headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in html
    report = page.context["report"]
    assert report.dry_run is False
    assert report.status == 200
    assert report.result == {
        "order": {"id": "A-1", "auth": "Bearer [REDACTED:TRY_TOKEN]"}
    }
    shown = report.requests[0]
    assert shown["method"] == "GET"
    assert shown["url"] == server.url("/orders/A-1")
    assert shown["headers"]["Authorization"] == "Bearer [REDACTED:TRY_TOKEN]"
    assert "Bearer [REDACTED:TRY_TOKEN]" in html
    assert re.search(r'class="try-status">200<', html)


def test_trying_a_write_is_a_dry_run_that_sends_nothing(
    client, admin_user, local_server, try_secret
):
    server = local_server()
    tool = save_http_tool(
        server.url("/orders/{order}/notes"),
        method="POST",
        http={"body": {"note": "{note}"}},
        risk=Tool.Risk.WRITE,
    )
    client.force_login(admin_user)
    page = client.post(try_url(tool), {"arguments": '{"order": "A-1", "note": "hi"}'})
    assert page.status_code == 200
    assert server.hits == []
    report = page.context["report"]
    assert report.dry_run is True and report.status is None
    shown = report.requests[0]
    assert shown["method"] == "POST"
    assert shown["body"] == {"note": "hi"}
    assert shown["headers"]["Idempotency-Key"].startswith("try:")
    assert shown["headers"]["Authorization"] == "Bearer [REDACTED:TRY_TOKEN]"
    html = page.content.decode()
    assert "dry run" in html and SECRET not in html


def test_arguments_that_break_the_schema_are_refused_before_anything_is_sent(
    client, admin_user, local_server
):
    server = local_server()
    tool = save_http_tool(server.url("/orders/{order}"))
    client.force_login(admin_user)
    for bad in ('{"order": 5}', "{}", "not json", "[1]"):
        page = client.post(try_url(tool), {"arguments": bad})
        assert page.status_code == 200
        assert page.context["report"] is None
        assert page.context["form"].errors["arguments"]
    assert server.hits == []


def test_a_refused_request_is_shown_as_an_error(client, admin_user, local_server):
    server = local_server()
    tool = save_http_tool(server.url("/orders/{order}"))
    client.force_login(admin_user)
    page = client.post(try_url(tool), {"arguments": '{"order": "A-1"}'})
    assert "secret TRY_TOKEN is not set" in page.context["report"].error
    assert server.hits == []
    html = page.content.decode()
    assert "Request sent" not in html
    if page.context["report"].requests:
        assert "Request not answered (see the error above)" in html


def test_a_request_to_a_host_it_may_not_reach_is_not_shown_as_sent(
    client, admin_user, local_server, try_secret
):
    server = local_server()
    tool = save_http_tool(
        server.url("/orders/{order}").replace("127.0.0.1", "localhost"),
        http={"allowed_hosts": ["localhost"]},
    )
    client.force_login(admin_user)

    page = client.post(try_url(tool), {"arguments": '{"order": "A-1"}'})

    report = page.context["report"]
    assert "loopback" in report.error and report.status is None
    assert server.hits == []
    html = page.content.decode()
    assert "Request sent" not in html


def test_only_tool_registrars_may_try_tools(client, demo, local_server):
    server = local_server()
    tool = save_http_tool(server.url("/orders/{order}"))
    staff = get_user_model().objects.create_user("staffer", password="x" * 12)
    staff.is_staff = True
    staff.save()
    client.force_login(staff)
    assert client.get(try_url(tool)).status_code == 403
    client.force_login(demo.alice)
    assert client.get(try_url(tool)).status_code == 302  # to the admin login
    client.logout()
    response = client.post(try_url(tool), {"arguments": '{"order": "A-1"}'})
    assert response.status_code == 302
    assert server.hits == []


def test_the_try_form_is_csrf_protected(admin_user, local_server):
    server = local_server()
    tool = save_http_tool(server.url("/orders/{order}"))
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    response = client.post(try_url(tool), {"arguments": '{"order": "A-1"}'})
    assert response.status_code == 403
    assert server.hits == []


def test_the_try_page_has_no_inline_script(client, admin_user):
    tool = save_http_tool("http://127.0.0.1:9/orders/{order}")
    client.force_login(admin_user)
    html = client.get(try_url(tool)).content.decode()
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html)
