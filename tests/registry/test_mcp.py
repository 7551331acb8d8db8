"""MCP tools: listing and import over stdio and HTTP, confirmation, calls in the loop.

Against the suite's own MCP server (tests/support/mcp_server.py) started for real:
as a stdio subprocess, and over streamable HTTP on a loopback port.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from mcp_types import CallToolResult, ImageContent, TextContent

from engine.execution import ToolError
from registry import mcp_import
from registry.adapters import mcp
from registry.models import Agent, MCPServer, Tool, ToolVersion
from registry.services import tool_confirm, tool_save
from runs import tasks as run_tasks
from runs.models import Step
from tests.support.admin_forms import admin_form_data
from tests.support.mcp_server import MCPHttpServer, stdio_command
from tests.support.ports import free_port
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask
from tests.support.scripted_model import tool_messages

ORDER = {"order_id": "A-1001", "status": "shipped", "total_eur": 42.5}
REMOTE_NAMES = {
    "lookup_order",
    "delete_order",
    "upsert_customer",
    "search_web",
    "calculate",
    "Server.Status",
}


@pytest.fixture(scope="module")
def http_mcp() -> Iterator[MCPHttpServer]:
    with MCPHttpServer() as server:
        yield server


@pytest.fixture(scope="module")
def listed() -> list[mcp.RemoteTool]:
    """The stdio server's listing, read once for tests not about listing itself."""
    config = mcp.ServerConfig("orders", "stdio", tuple(stdio_command()))
    return mcp.list_server_tools(config)


@pytest.fixture
def orders(db: Any) -> MCPServer:
    return MCPServer.objects.create(
        name="orders", transport="stdio", command=stdio_command()
    )


@pytest.fixture
def orders_http(db: Any, http_mcp: MCPHttpServer) -> MCPServer:
    return MCPServer.objects.create(
        name="orders-web", transport="http", url=http_mcp.url
    )


def imported(server: MCPServer) -> dict[str, Tool]:
    return {t.mcp_tool: t for t in Tool.objects.filter(mcp_server=server)}


def orders_desk(*tools: Tool, admin: Any) -> Agent:
    """An agent offered the confirmed imported tools (by the server's tag)."""
    for tool in tools:
        tool_confirm(tool=tool, user=admin)
    return Agent.objects.create(name="orders-desk", tool_tags=["orders"])


# -- listing -----------------------------------------------------------------------


def test_listing_over_stdio_returns_every_tool_with_its_annotations(orders):
    listed = {t.name: t for t in mcp.list_server_tools(orders)}

    assert set(listed) == REMOTE_NAMES
    lookup = listed["lookup_order"]
    assert lookup.read_only is True and lookup.open_world is False
    assert lookup.input_schema["properties"]["order_id"]["description"]
    assert listed["delete_order"].destructive is True
    assert listed["upsert_customer"].idempotent is True
    assert listed["search_web"].open_world is True


def test_listing_over_streamable_http_returns_the_same_tools(orders_http):
    listed = {t.name: t for t in mcp.list_server_tools(orders_http)}

    assert set(listed) == REMOTE_NAMES
    assert listed["delete_order"].destructive is True


# -- import ------------------------------------------------------------------------


def assert_imported_with_default_policy(tools: dict[str, Tool], prefix: str) -> None:
    assert set(tools) == REMOTE_NAMES
    for tool in tools.values():
        assert tool.kind == Tool.Kind.MCP
        assert tool.enabled is False and tool.confirmed is False
        assert tool.parameters["type"] == "object"
        assert tool.description
        assert tool.version == 1
        assert ToolVersion.objects.filter(tool=tool, version=1).exists()
    lookup = tools["lookup_order"]
    assert lookup.name == "lookup_order"
    assert (lookup.risk, lookup.approval) == ("read_only", "never")
    assert lookup.untrusted_output is False
    assert lookup.parameters["required"] == ["order_id"]
    delete = tools["delete_order"]
    assert (delete.risk, delete.approval) == ("irreversible", "always")
    assert delete.idempotent is False and delete.max_retries == 0
    upsert = tools["upsert_customer"]
    assert (upsert.risk, upsert.approval) == ("write", "never")
    assert upsert.idempotent is True and upsert.max_retries == 1
    assert tools["search_web"].untrusted_output is True
    assert tools["Server.Status"].name == "server_status"
    # The demo already has a calculate: the server's name tells them apart.
    assert tools["calculate"].name == f"{prefix}_calculate"


def test_import_over_stdio_maps_annotations_to_an_unconfirmed_disabled_policy(
    orders, demo
):
    outcomes = mcp_import.mcp_import_tools(server=orders, user=demo.admin)

    assert {o.status for o in outcomes} == {"created"}
    assert_imported_with_default_policy(imported(orders), "orders")
    assert Tool.objects.get(name="calculate").kind == Tool.Kind.PYTHON
    assert ToolVersion.objects.get(tool__name="lookup_order").changed_by == demo.admin


def test_a_server_with_imported_tools_is_disabled_not_deleted(
    orders, demo, listed, client
):
    client.force_login(demo.admin)
    empty = MCPServer.objects.create(name="unused", transport="stdio", command=["x"])
    assert (
        client.get(f"/admin/registry/mcpserver/{empty.pk}/delete/").status_code == 200
    )

    mcp_import.mcp_import_tools(server=orders, remote_tools=listed)

    url = f"/admin/registry/mcpserver/{orders.pk}/"
    assert client.get(f"{url}delete/").status_code == 403
    assert f"{url}delete/" not in client.get(f"{url}change/").content.decode()


def test_import_over_http_maps_annotations_the_same_way(orders_http, demo):
    mcp_import.mcp_import_tools(server=orders_http, user=demo.admin)

    assert_imported_with_default_policy(imported(orders_http), "orders_web")


def test_importing_again_changes_nothing_and_makes_no_new_version(orders, demo, listed):
    mcp_import.mcp_import_tools(server=orders, remote_tools=listed)
    outcomes = mcp_import.mcp_import_tools(server=orders)

    assert {o.status for o in outcomes} == {"unchanged"}
    assert ToolVersion.objects.filter(tool__mcp_server=orders).count() == 6


def test_a_tool_changed_on_the_server_gets_a_new_version_and_is_reviewed_again(
    orders, demo, listed
):
    mcp_import.mcp_import_tools(server=orders, remote_tools=listed)
    lookup = Tool.objects.get(name="lookup_order")
    tool_confirm(tool=lookup, user=demo.admin)
    changed = [
        mcp.RemoteTool(
            name=t.name,
            description=t.description + " Also deletes old orders.",
            input_schema=t.input_schema,
            read_only=t.read_only,
        )
        if t.name == "lookup_order"
        else t
        for t in listed
    ]

    outcomes = {
        o.remote: o
        for o in mcp_import.mcp_import_tools(server=orders, remote_tools=changed)
    }

    assert outcomes["lookup_order"].status == "updated"
    assert "confirms it again" in outcomes["lookup_order"].detail
    lookup.refresh_from_db()
    assert lookup.description.endswith("Also deletes old orders.")
    assert lookup.enabled is False and lookup.confirmed is False
    assert lookup.version == 3  # imported, confirmed+enabled, changed


def test_a_tool_the_server_no_longer_lists_is_reported_as_gone(orders, demo, listed):
    mcp_import.mcp_import_tools(server=orders, remote_tools=listed)
    fewer = [t for t in listed if t.name != "search_web"]

    outcomes = {
        o.remote: o
        for o in mcp_import.mcp_import_tools(server=orders, remote_tools=fewer)
    }

    assert outcomes["search_web"].status == "gone"
    assert Tool.objects.filter(name="search_web").exists()


def test_an_input_schema_that_is_not_an_object_is_skipped_with_a_reason(orders, demo):
    odd = [mcp.RemoteTool("get_size", "Get the size of a thing.", {"type": "string"})]

    (outcome,) = mcp_import.mcp_import_tools(server=orders, remote_tools=odd)

    assert outcome.status == "skipped"
    assert "not an object" in outcome.detail
    assert not Tool.objects.filter(mcp_server=orders).exists()


def test_import_mcp_tools_command_prints_one_line_per_tool(orders, demo, capsys):
    call_command("import_mcp_tools", "orders")

    out = capsys.readouterr().out
    assert "created: lookup_order → lookup_order (v1)" in out
    assert "created: calculate → orders_calculate (v1)" in out
    assert "orders: 6 created." in out


def test_import_mcp_tools_command_names_an_unknown_server(db):
    with pytest.raises(CommandError, match="No MCP server named 'nope'"):
        call_command("import_mcp_tools", "nope")


# -- confirmation ------------------------------------------------------------------


def test_an_unconfirmed_tool_cannot_be_enabled(orders, demo, listed):
    mcp_import.mcp_import_tools(server=orders, remote_tools=listed)
    tool = Tool.objects.get(name="lookup_order")
    tool.enabled = True

    with pytest.raises(ValidationError) as error:
        tool_save(tool=tool, user=demo.admin)

    assert "not confirmed" in " ".join(error.value.message_dict["enabled"])
    tool.refresh_from_db()
    assert tool.enabled is False


def test_confirming_enables_the_tool_with_a_new_version_and_an_audit_event(
    orders, demo, listed
):
    from audit.models import AuditEvent

    mcp_import.mcp_import_tools(server=orders, remote_tools=listed)
    tool = tool_confirm(tool=Tool.objects.get(name="delete_order"), user=demo.admin)

    assert tool.enabled is True and tool.confirmed is True
    assert (tool.risk, tool.approval) == ("irreversible", "always")
    latest = tool.versions.order_by("-version").first()
    assert latest is not None and latest.version == 2
    assert latest.changed_by == demo.admin and latest.definition["enabled"] is True
    assert AuditEvent.objects.filter(
        kind="tool.confirmed", object_id="delete_order"
    ).exists()


def test_the_admin_action_confirms_and_enables_selected_tools(
    client, orders, demo, listed
):
    mcp_import.mcp_import_tools(server=orders, remote_tools=listed)
    client.force_login(demo.admin)
    tool = Tool.objects.get(name="lookup_order")

    response = client.post(
        "/admin/registry/tool/",
        {"action": "confirm_and_enable", "_selected_action": [tool.pk]},
        follow=True,
    )

    assert "Confirmed and enabled: lookup_order" in response.content.decode()
    tool.refresh_from_db()
    assert tool.enabled is True and tool.confirmed is True


def test_the_admin_form_refuses_to_enable_an_unconfirmed_tool(
    client, orders, demo, listed
):
    mcp_import.mcp_import_tools(server=orders, remote_tools=listed)
    client.force_login(demo.admin)
    tool = Tool.objects.get(name="lookup_order")
    url = f"/admin/registry/tool/{tool.pk}/change/"
    data = admin_form_data(client.get(url))
    data["enabled"] = "on"

    response = client.post(url, data)

    assert response.status_code == 200
    assert "policy is not confirmed yet" in response.content.decode()
    tool.refresh_from_db()
    assert tool.enabled is False


def test_the_import_button_on_the_server_page_imports_its_tools(client, orders, demo):
    client.force_login(demo.admin)
    page = client.get(f"/admin/registry/mcpserver/{orders.pk}/change/")
    assert f"/admin/registry/mcpserver/{orders.pk}/import/" in page.content.decode()

    response = client.post(
        f"/admin/registry/mcpserver/{orders.pk}/import/", follow=True
    )

    assert response.redirect_chain[-1][0].endswith(
        f"?mcp_server__id__exact={orders.pk}"
    )
    assert "created: lookup_order" in response.content.decode()
    assert len(imported(orders)) == 6


def test_the_import_action_on_the_server_list_imports_its_tools(client, orders, demo):
    client.force_login(demo.admin)

    client.post(
        "/admin/registry/mcpserver/",
        {"action": "import_tools", "_selected_action": [orders.pk]},
    )

    assert len(imported(orders)) == 6


def test_chat_users_cannot_import_tools(client, orders, alice):
    client.force_login(alice)

    response = client.post(f"/admin/registry/mcpserver/{orders.pk}/import/")

    assert response.status_code == 302  # to the admin login
    assert not Tool.objects.filter(mcp_server=orders).exists()


# -- calls through the whole loop --------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_scripted_model_calls_an_imported_mcp_tool_through_the_loop(
    orders, demo, alice, model, listed
):
    mcp_import.mcp_import_tools(server=orders, user=demo.admin, remote_tools=listed)
    lookup = Tool.objects.get(name="lookup_order")
    agent = orders_desk(lookup, admin=demo.admin)
    script = Script(
        [tool_call("lookup_order", {"order_id": "A-1001"}), text("A-1001 has shipped.")]
    )
    model(script)

    task = ask(alice, agent, "Where is order A-1001?")

    assert task.status == "succeeded", task.error_message
    assert task.final_answer == "A-1001 has shipped."
    step = task.steps.get(kind=Step.Kind.TOOL_CALL)
    assert (step.tool, step.status) == ("lookup_order", "succeeded")
    assert step.arguments == {"order_id": "A-1001"}
    assert step.result == ORDER
    lookup.refresh_from_db()
    assert step.tool_version == lookup.version
    (offered,) = script.requests[0]["tools"]
    assert offered["function"]["name"] == "lookup_order"
    assert offered["function"]["parameters"]["required"] == ["order_id"]
    tool_message = tool_messages(script.requests[1])
    assert json.loads(tool_message[0]["content"]) == ORDER
    (definition,) = task.agent_snapshot["tools"]
    assert definition["mcp"] == {"server": "orders", "tool": "lookup_order"}
    assert definition["leaves_house"] is True


@pytest.mark.django_db(transaction=True)
def test_a_destructive_mcp_tool_waits_for_approval_then_runs_once(
    orders, demo, alice, operator, model, listed
):
    from approvals.services import approval_decide

    mcp_import.mcp_import_tools(server=orders, user=demo.admin, remote_tools=listed)
    agent = orders_desk(Tool.objects.get(name="delete_order"), admin=demo.admin)
    model(
        Script(
            [tool_call("delete_order", {"order_id": "A-1002"}), text("Deleted A-1002.")]
        )
    )

    task = ask(alice, agent, "Delete order A-1002")

    assert task.status == "waiting_approval"
    step = task.steps.get(kind=Step.Kind.TOOL_CALL)
    assert step.status == "waiting_approval" and step.result is None
    approval = task.approvals.get()
    assert (approval.tool, approval.risk) == ("delete_order", "irreversible")

    approval_decide(approval=approval, user=operator, decision="approve")
    run_tasks.task_advance(task_id=task.pk)

    task.refresh_from_db()
    assert task.status == "succeeded", task.error_message
    step.refresh_from_db()
    assert step.status == "succeeded"
    assert step.result == {"deleted": "A-1002"}


@pytest.mark.django_db(transaction=True)
def test_an_error_of_the_mcp_tool_becomes_an_error_observation(
    orders, demo, alice, model, listed
):
    mcp_import.mcp_import_tools(server=orders, user=demo.admin, remote_tools=listed)
    agent = orders_desk(Tool.objects.get(name="lookup_order"), admin=demo.admin)
    script = Script(
        [tool_call("lookup_order", {"order_id": "Z-9"}), text("There is no Z-9.")]
    )
    model(script)

    task = ask(alice, agent, "Where is order Z-9?")

    assert task.status == "succeeded", task.error_message
    step = task.steps.get(kind=Step.Kind.TOOL_CALL)
    assert step.status == "failed"
    assert step.error_class == "tool_error"
    assert "No order Z-9" in step.error
    tool_message = tool_messages(script.requests[1])
    assert "No order Z-9" in tool_message[0]["content"]


@pytest.mark.django_db(transaction=True)
def test_a_call_to_a_server_that_went_down_fails_with_a_clear_error(demo, alice, model):
    with MCPHttpServer() as server:
        row = MCPServer.objects.create(name="orders", transport="http", url=server.url)
        mcp_import.mcp_import_tools(server=row, user=demo.admin)
    agent = orders_desk(Tool.objects.get(name="lookup_order"), admin=demo.admin)
    model(Script([tool_call("lookup_order", {"order_id": "A-1001"}), text("Sorry.")]))

    task = ask(alice, agent, "Where is order A-1001?")

    step = task.steps.get(kind=Step.Kind.TOOL_CALL)
    assert step.status == "failed"
    assert step.error_class == "transient"
    assert "MCP server 'orders' is unreachable" in step.error
    assert row.url in step.error
    # A read-only tool is retried once (it is safe to), then gives up.
    assert len(step.attempts) == 2


# -- a server that is down ---------------------------------------------------------


def test_listing_a_server_that_is_down_says_it_is_unreachable(db):
    url = f"http://127.0.0.1:{free_port()}/mcp"
    server = MCPServer.objects.create(name="gone", transport="http", url=url)

    with pytest.raises(mcp.MCPUnavailable) as error:
        mcp.list_server_tools(server, timeout_s=5)

    assert str(error.value).startswith("MCP server 'gone' is unreachable:")
    assert url in str(error.value)


def test_importing_from_a_command_that_does_not_exist_says_so(db):
    MCPServer.objects.create(
        name="typo", transport="stdio", command=["/nonexistent/mcp-server"]
    )

    with pytest.raises(CommandError) as error:
        call_command("import_mcp_tools", "typo", "--timeout", "5")

    assert "MCP server 'typo' could not be started: command not found" in str(
        error.value
    )


def test_a_server_that_exits_at_start_up_shows_its_last_output(db):
    server = MCPServer.objects.create(
        name="broken",
        transport="stdio",
        command=["python3", "-c", "import sys; sys.exit('missing ORDERS_TOKEN')"],
    )

    with pytest.raises(mcp.MCPUnavailable) as error:
        mcp.list_server_tools(server, timeout_s=10)

    assert "could not be started" in str(error.value)
    assert "missing ORDERS_TOKEN" in str(error.value)


def test_a_disabled_server_refuses_calls_with_a_clear_error(orders, demo, listed):
    mcp_import.mcp_import_tools(server=orders, remote_tools=listed)
    orders.enabled = False
    orders.save()
    tool = Tool.objects.select_related("mcp_server").get(name="lookup_order")
    handler = mcp.mcp_handler(tool)
    assert handler is not None

    with pytest.raises(ToolError, match="MCP server 'orders' is disabled"):
        handler({"order_id": "A-1001"}, context_for(tool))


def context_for(tool: Tool) -> Any:
    import time

    from engine.spec import CallContext

    return CallContext(
        task_id="t",
        seq=1,
        idempotency_key="t:1:0",
        tool=tool.spec(),
        deadline=time.monotonic() + 10,
    )


# -- conversions -------------------------------------------------------------------


def test_structured_content_wins_over_text():
    result = CallToolResult(
        content=[TextContent(type="text", text="ignored")],
        structured_content={"a": 1},
    )
    assert mcp.result_data(result) == {"a": 1}


def test_a_single_text_block_is_a_string_or_the_json_it_holds():
    plain = CallToolResult(content=[TextContent(type="text", text="all good")])
    holds_json = CallToolResult(content=[TextContent(type="text", text='{"n": 2}')])
    assert mcp.result_data(plain) == "all good"
    assert mcp.result_data(holds_json) == {"n": 2}


def test_several_blocks_become_a_list_and_binary_content_is_described():
    result = CallToolResult(
        content=[
            TextContent(type="text", text="a chart:"),
            ImageContent(type="image", data="AAAA", mime_type="image/png"),
        ]
    )
    text_part, image = mcp.result_data(result)
    assert text_part == "a chart:"
    assert image["type"] == "image" and image["mime_type"] == "image/png"
    assert "not shown" in image["omitted"]
    assert "AAAA" not in json.dumps(image)


def test_an_error_result_raises_a_tool_error_with_its_text():
    result = CallToolResult(
        content=[TextContent(type="text", text="quota exceeded")], is_error=True
    )
    with pytest.raises(ToolError, match="quota exceeded"):
        mcp.result_data(result)


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("lookup_order", "lookup_order"),
        ("getOrderStatus", "get_order_status"),
        ("Server.Status", "server_status"),
        ("list-open-PRs", "list_open_prs"),
        ("42things", "tool_42things"),
        ("x", "x_tool"),
        ("a" * 80, "a" * 64),
    ],
)
def test_mcp_names_are_sanitised_to_tool_names(raw, name):
    assert mcp_import.sanitise_name(raw) == name


def test_minimal_schemas_are_repaired_into_object_schemas():
    assert mcp_import.repair_schema(None) == {"type": "object", "properties": {}}
    assert mcp_import.repair_schema({"properties": {"q": {"type": "string"}}}) == {
        "type": "object",
        "properties": {"q": {"type": "string"}},
    }
    repaired = mcp_import.repair_schema(
        {"type": "object", "properties": {"q": {}}, "required": ["q", "ghost"]}
    )
    assert repaired["required"] == ["q"]
    with pytest.raises(ValueError, match="not an object"):
        mcp_import.repair_schema({"type": "array"})


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"transport": "stdio", "command": "[]"}, "needs its command"),
        ({"transport": "stdio", "command": '"npx server"'}, "needs its command"),
        ({"transport": "http", "command": "[]", "url": ""}, "needs its URL"),
    ],
)
def test_the_server_form_needs_a_command_for_stdio_and_a_url_for_http(
    client, demo, fields, error
):
    client.force_login(demo.admin)

    response = client.post(
        "/admin/registry/mcpserver/add/",
        {"name": "orders", "enabled": "on", "url": "", **fields},
    )

    assert response.status_code == 200
    assert error in response.content.decode()
    assert not MCPServer.objects.exists()
