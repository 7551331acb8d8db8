"""A stdio MCP server's own environment: set per server, secrets by reference.

The server gets the SDK's small safe environment plus exactly what its settings
name, with ``{{secret:NAME}}`` filled in from the secret store; nothing else of
this process's environment (model keys, other servers' secrets) reaches it.
"""

from __future__ import annotations

from typing import Any

import pytest

from registry.adapters import mcp
from registry.models import MCPServer
from registry.secrets import secret_set
from tests.support.admin_forms import admin_form_data
from tests.support.clients import logged_in
from tests.support.mcp_server import stdio_command

pytestmark = pytest.mark.django_db


def stdio_server(
    *, name: str = "orders", env: dict[str, Any] | None = None
) -> MCPServer:
    """A stdio server row launching the suite's MCP server, with ``env`` if given."""
    extra = {} if env is None else {"env": env}
    return MCPServer.objects.create(
        name=name, transport="stdio", command=stdio_command(), **extra
    )


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        (["A=1"], "is a JSON object"),
        ({"1BAD": "x"}, "is not a variable name"),
        ({"PATH": "/tmp"}, "safe default environment"),
        ({"TOKEN": 3}, "is a string"),
        ({"TOKEN": "{{ secret:X }}"}, "malformed secret reference"),
    ],
)
def test_bad_environment_settings_are_refused_with_a_reason(env, problem):
    assert any(problem in message for message in mcp.env_errors(env))


def test_good_environment_settings_pass():
    assert mcp.env_errors({"API_URL": "https://x", "TOKEN": "{{secret:T}}"}) == []
    assert mcp.env_secrets({"A": "{{secret:T}}-{{secret:U}}", "B": "x"}) == ["T", "U"]


def test_the_config_fills_in_secrets_and_keeps_them_out_of_its_repr():
    secret_set(name="ORDERS_TOKEN", value="tok-123456789")
    server = stdio_server(
        env={"ORDERS_TOKEN": "Bearer {{secret:ORDERS_TOKEN}}", "ORDERS_REGION": "eu"}
    )

    config = mcp.ServerConfig.of(server)

    assert dict(config.env) == {
        "ORDERS_REGION": "eu",
        "ORDERS_TOKEN": "Bearer tok-123456789",
    }
    assert "tok-123456789" not in repr(config)
    config.check()


def test_a_missing_secret_says_which_one_before_anything_starts():
    server = stdio_server(env={"ORDERS_TOKEN": "{{secret:NOT_THERE}}"})
    with pytest.raises(mcp.MCPUnavailable, match="NOT_THERE"):
        mcp.ServerConfig.of(server).check()


def test_the_server_gets_its_environment_and_nothing_else(monkeypatch):
    monkeypatch.setenv("REACH_SECRET_OTHER_SERVERS_KEY", "not-for-orders")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-orders")
    secret_set(name="ORDERS_TOKEN", value="tok-abc")
    server = stdio_server(
        name="orders-env",
        env={"ORDERS_ECHO_ENV": "1", "ORDERS_TOKEN": "{{secret:ORDERS_TOKEN}}"},
    )
    config = mcp.ServerConfig.of(server)
    try:
        result = mcp.call_remote_tool(config, "Server.Status", {}, timeout_s=30)
    finally:
        mcp.close_sessions()

    seen = str(mcp.result_data(result))
    assert "ORDERS_TOKEN=tok-abc" in seen
    assert "OPENAI_API_KEY" not in seen
    assert "REACH_SECRET_OTHER_SERVERS_KEY" not in seen
    assert "not-for-orders" not in seen


def test_admins_set_a_server_s_environment_in_the_admin(demo):
    admin = logged_in(demo.admin)
    server = stdio_server()
    url = f"/admin/registry/mcpserver/{server.pk}/change/"
    data = admin_form_data(admin.get(url))

    data["env"] = '{"ORDERS_TOKEN": "{{secret:ORDERS_TOKEN}}"}'
    assert admin.post(url, data).status_code == 302
    server.refresh_from_db()
    assert server.env == {"ORDERS_TOKEN": "{{secret:ORDERS_TOKEN}}"}

    data["env"] = '{"PATH": "/evil"}'
    refused = admin.post(url, data)
    assert refused.status_code == 200
    assert "safe default environment" in refused.content.decode()
