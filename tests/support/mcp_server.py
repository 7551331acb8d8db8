"""A small MCP server for the test suite, built on the official SDK's ``MCPServer``.

Tools with annotations that map to Agent Reach policy: a read-only lookup, a
destructive delete, an idempotent upsert, an open-world search, one whose name
collides with a demo tool, and one whose name needs sanitising. Every process
starts with the same orders, so calls are deterministic.

Runnable over stdio (what an MCP host launches)::

    python -m tests.support.mcp_server

or over streamable HTTP on a loopback port::

    python -m tests.support.mcp_server --http --port 0
    # prints "READY http://127.0.0.1:PORT/mcp" and serves until SIGTERM

:class:`MCPHttpServer` runs the latter as a subprocess for a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from tests.support.lifecycle import Started

ROOT = Path(__file__).resolve().parents[2]

ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {"order_id": "A-1001", "status": "shipped", "total_eur": 42.5},
    "A-1002": {"order_id": "A-1002", "status": "open", "total_eur": 17.0},
}

OrderId = Annotated[str, Field(description="The order number, e.g. A-1001")]


def build_server() -> MCPServer:
    """The test server with its tools registered."""
    server = MCPServer("reach-test-orders", log_level="WARNING")
    orders = {key: dict(value) for key, value in ORDERS.items()}
    customers: dict[str, str] = {}

    @server.tool(
        description=(
            "Look up one order by its number. Returns the order's status and its "
            "total in euros."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    def lookup_order(order_id: OrderId) -> dict[str, Any]:
        order = orders.get(order_id)
        if order is None:
            raise ToolError(f"No order {order_id}: check the order number.")
        return order

    @server.tool(
        description=(
            "Delete one order for good. Changes: removes the order and its history; "
            "this cannot be undone."
        ),
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, open_world_hint=False
        ),
    )
    def delete_order(order_id: OrderId) -> dict[str, Any]:
        if orders.pop(order_id, None) is None:
            raise ToolError(f"No order {order_id}: nothing was deleted.")
        return {"deleted": order_id}

    @server.tool(
        description=(
            "Create or update a customer record by id. Changes: stores the "
            "customer's display name; calling it again with the same values "
            "changes nothing."
        ),
        annotations=ToolAnnotations(
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )
    def upsert_customer(
        customer_id: Annotated[str, Field(description="The customer id, e.g. C-7")],
        name: Annotated[str, Field(description="The customer's display name")],
    ) -> dict[str, Any]:
        created = customer_id not in customers
        customers[customer_id] = name
        return {"customer_id": customer_id, "name": name, "created": created}

    @server.tool(
        description=(
            "Search the public web for pages about a query. Returns page titles "
            "and addresses written by third parties."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True),
    )
    def search_web(
        query: Annotated[str, Field(description="Words to search for")],
    ) -> str:
        # Unstructured (text) output on purpose.
        return f"1 result for {query}: Example page — https://example.com/"

    @server.tool(
        description="Add two numbers and return their sum (collides with a demo tool).",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    def calculate(
        a: Annotated[float, Field(description="The first number")],
        b: Annotated[float, Field(description="The second number")],
    ) -> float:
        return a + b

    @server.tool(
        name="Server.Status",
        description="Report whether the order service is healthy, as plain text.",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    def server_status() -> str:
        # With ORDERS_ECHO_ENV=1 in its environment (a test of what a stdio
        # server is given), it also names every variable it was started with.
        if os.environ.get("ORDERS_ECHO_ENV") == "1":
            return "all systems nominal; env: " + ",".join(
                f"{name}={os.environ[name]}" if name.startswith("ORDERS_") else name
                for name in sorted(os.environ)
            )
        return "all systems nominal"

    return server


def _serve_http(port: int) -> None:
    import anyio
    import uvicorn

    server = build_server()
    app = server.streamable_http_app(host="127.0.0.1")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    chosen = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    http = uvicorn.Server(config)
    print(f"READY http://127.0.0.1:{chosen}/mcp", flush=True)
    anyio.run(lambda: http.serve(sockets=[sock]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    if args.http:
        _serve_http(args.port)
    else:
        build_server().run("stdio")


def stdio_command() -> list[str]:
    """The argv an MCPServer row uses to launch this server over stdio."""
    return [sys.executable, "-m", "tests.support.mcp_server"]


class MCPHttpServer(Started):
    """This server over streamable HTTP in a subprocess on a free loopback port."""

    def __init__(self, start_timeout_s: float = 30.0) -> None:
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> MCPHttpServer:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [*stdio_command(), "--http", "--port", "0"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + self.start_timeout_s
        line = ""
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if line.startswith("READY "):
                self.url = line.split()[1]
                break
            if not line and self.process.poll() is not None:
                break
        if not self.url:
            self.stop()
            raise RuntimeError(f"MCP test server did not start: {line!r}")
        return self

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


if __name__ == "__main__":
    main()
