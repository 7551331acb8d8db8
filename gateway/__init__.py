"""Agent Reach as an MCP gateway: the registry's tools, under the same policy, to
any MCP client (streamable HTTP at ``/mcp/`` with a bearer token, or stdio through
``manage.py mcp_serve``).

Each ``tools/call`` is a real task through the engine, answered by a deterministic
model client (:mod:`gateway.model_client`) that proposes exactly that call and then
finishes with its result; validation, risk tiers, taint, approvals, the
idempotency ledger and the trace are the engine's, not re-implemented here.
"""
