"""``manage.py doctor`` against the scripted model server and the bundled Redis."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command

from infra.runtime import redis_client
from reach_site import celery as reach_celery
from registry import mcp_import
from registry.adapters import mcp
from registry.models import MCPServer, Tool
from registry.services import tool_confirm
from tests.support.mcp_server import stdio_command
from tests.support.ports import free_port
from tests.support.replies import Script
from tests.support.waiting import wait_for

pytestmark = pytest.mark.usefixtures("flush_redis")


@pytest.fixture
def scripted(model: Any) -> Script:
    """An empty script, serving as the product's model."""
    script = Script([])
    model(script)
    return script


@pytest.fixture
def worker_alive() -> Iterator[None]:
    redis_client().set("reach:worker:celery@box-1", "1", ex=60)
    yield


def doctor(capsys: Any, *args: str) -> tuple[int, list[str]]:
    """Run doctor; return its exit code and output lines."""
    try:
        call_command("doctor", "--timeout", "3", "--ping-timeout", "0.5", *args)
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, capsys.readouterr().out.strip().splitlines()


def line(lines: list[str], prefix: str) -> str:
    (found,) = [x for x in lines if x.startswith(prefix)]
    return found


@pytest.mark.django_db
def test_doctor_passes_when_model_redis_workers_and_tools_answer(
    demo, scripted, worker_alive, settings, capsys
):
    code, lines = doctor(capsys)

    assert code == 0, lines
    assert line(lines, "model ") == (
        f"model {settings.OPENAI_BASE_URL}: ok (serves scripted-model)"
    )
    assert line(lines, "redis ").endswith(": ok (PONG)")
    assert line(lines, "workers") == "workers: ok (1 alive: celery@box-1)"
    for name in ("calculate", "search_notes", "create_ticket", "send_email"):
        assert line(lines, f"tool {name} (python)") == (
            f"tool {name} (python): ok (handler {name} registered)"
        )
    assert lines[-1] == "All checks passed."
    # GET /models only: the model was never asked to complete anything.
    assert scripted.requests == []


@pytest.mark.django_db
def test_doctor_fails_with_a_reason_when_no_worker_is_running(demo, scripted, capsys):
    code, lines = doctor(capsys)

    assert code == 1
    assert line(lines, "workers").startswith(
        "workers: FAIL no worker heartbeat (reach:worker:*) and no reply to a ping"
    )
    assert lines[-1] == "1 check failed."


@pytest.mark.django_db
def test_doctor_fails_when_the_model_endpoint_is_down(
    demo, worker_alive, settings, capsys
):
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{free_port()}/v1"

    code, lines = doctor(capsys)

    assert code == 1
    assert line(lines, "model ").startswith(
        f"model {settings.OPENAI_BASE_URL}: FAIL GET /models failed: "
    )


@pytest.mark.django_db
def test_doctor_fails_when_redis_is_down(demo, scripted, settings, capsys):
    settings.REDIS_URL = f"redis://:hunter2@127.0.0.1:{free_port()}/0"

    code, lines = doctor(capsys)

    assert code == 1
    redis_line = line(lines, "redis ")
    assert ": FAIL PING failed: " in redis_line
    assert "hunter2" not in redis_line
    assert line(lines, "workers") == "workers: FAIL cannot check: Redis is unreachable"


def http_tool(name: str, url: str, allowed_hosts: list[str]) -> Tool:
    # Created directly: doctor checks what is registered, however it got there.
    return Tool.objects.create(
        name=name,
        description="Fetch a thing over HTTP for the doctor test.",
        parameters={"type": "object", "properties": {}},
        kind=Tool.Kind.HTTP,
        http={"method": "GET", "url": url, "allowed_hosts": allowed_hosts},
    )


@pytest.mark.django_db
def test_doctor_checks_that_http_tools_reach_their_host_through_the_guard(
    demo, scripted, worker_alive, settings, capsys
):
    port = int(settings.OPENAI_BASE_URL.rsplit(":", 1)[1].split("/")[0])
    http_tool("get_status", f"http://127.0.0.1:{port}/status/{{id}}", ["127.0.0.1"])
    http_tool("get_gone", f"http://127.0.0.1:{free_port()}/x", ["127.0.0.1"])
    http_tool("get_internal", f"http://127.0.0.1:{port}/admin", ["example.com"])

    code, lines = doctor(capsys)

    assert code == 1
    assert line(lines, "tool get_status (http)").startswith(
        f"tool get_status (http): ok (HEAD http://127.0.0.1:{port}/ → HTTP "
    )
    assert line(lines, "tool get_gone (http)").startswith(
        "tool get_gone (http): FAIL http://127.0.0.1:"
    )
    internal = line(lines, "tool get_internal (http)")
    assert internal.startswith("tool get_internal (http): FAIL ")
    assert "allowed" in internal.lower()
    assert lines[-1] == "2 checks failed."


@pytest.mark.django_db
def test_doctor_checks_mcp_tools_by_listing_their_server(
    demo, scripted, worker_alive, capsys
):
    orders = MCPServer.objects.create(
        name="orders", transport="stdio", command=stdio_command()
    )
    down = MCPServer.objects.create(
        name="down", transport="http", url=f"http://127.0.0.1:{free_port()}/mcp"
    )
    mcp_import.mcp_import_tools(server=orders, user=demo.admin)
    tool_confirm(tool=Tool.objects.get(name="lookup_order"), user=demo.admin)
    gone = Tool.objects.get(name="search_web")
    gone.mcp_tool = "search_the_web"
    gone.save()
    tool_confirm(tool=gone, user=demo.admin)
    listed = [mcp.RemoteTool("ping_service", "Ping the service and report.", {})]
    mcp_import.mcp_import_tools(server=down, remote_tools=listed)
    tool_confirm(tool=Tool.objects.get(name="ping_service"), user=demo.admin)

    code, lines = doctor(capsys)

    assert code == 1
    assert line(lines, "tool lookup_order (mcp)") == (
        "tool lookup_order (mcp): ok (MCP server orders lists lookup_order)"
    )
    assert line(lines, "tool search_web (mcp)") == (
        "tool search_web (mcp): FAIL MCP server orders no longer lists 'search_the_web'"
    )
    assert line(lines, "tool ping_service (mcp)").startswith(
        "tool ping_service (mcp): FAIL MCP server 'down' is unreachable: "
    )
    # Disabled (unconfirmed) imports are not checked.
    assert not [x for x in lines if x.startswith("tool delete_order")]


def test_the_worker_heartbeat_keeps_an_expiring_key_until_stopped():
    key = "reach:worker:celery@beat-test"
    stop = reach_celery.worker_heartbeat_start("celery@beat-test", every_s=0.05)
    try:
        wait_for(lambda: redis_client().exists(key) == 1, 5)
        assert 0 < redis_client().ttl(key) <= reach_celery.WORKER_HEARTBEAT_TTL_S
    finally:
        stop.set()
    wait_for(lambda: redis_client().exists(key) == 0, 5)


class FakeConsumer:
    """What Celery sends worker_ready from: it knows the worker's hostname."""

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname


def test_a_ready_worker_starts_beating_and_stops_at_shutdown():
    key = "reach:worker:celery@signal-test"

    reach_celery.worker_ready.send(sender=FakeConsumer("celery@signal-test"))
    wait_for(lambda: redis_client().exists(key) == 1, 5)
    reach_celery.worker_shutdown.send(sender=None)

    wait_for(lambda: redis_client().exists(key) == 0, 5)
