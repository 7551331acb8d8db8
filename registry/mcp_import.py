"""MCP tool import: one registry tool per tool an MCP server lists.

:func:`mcp_import_tools` lists a server's tools (:mod:`registry.adapters.mcp`)
and creates or updates a :class:`~registry.models.Tool` for each through the
registry's tool save, with the policy its annotations suggest; new and changed
tools stay disabled until an operator confirms them. Used by the admin and
``manage.py import_mcp_tools``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from engine.planning import check_parameters_schema, check_tool_name
from engine.spec import ApprovalMode, Risk
from registry import services as registry_services
from registry.adapters.mcp import LIST_TIMEOUT_S, RemoteTool, list_server_tools
from registry.models import MCPServer, Tool

#: Timeout given to imported tools (a stdio server's first call starts it).
IMPORTED_TIMEOUT_S = 30.0


# -- import ------------------------------------------------------------------------

_RISK_RANK = {Risk.READ_ONLY: 0, Risk.WRITE: 1, Risk.IRREVERSIBLE: 2}


def default_policy(remote: RemoteTool) -> dict[str, Any]:
    """The policy an MCP tool's annotations suggest (the operator confirms it).

    ``readOnlyHint`` → read_only; ``destructiveHint`` → irreversible (approval
    always); otherwise write. ``idempotentHint`` → idempotent (safe to retry);
    ``openWorldHint`` → untrusted output. Annotations are hints from the server,
    which is why an imported tool stays disabled until an operator confirms.
    """
    if remote.read_only:
        risk, approval = Risk.READ_ONLY, ApprovalMode.NEVER
    elif remote.destructive:
        risk, approval = Risk.IRREVERSIBLE, ApprovalMode.ALWAYS
    else:
        risk, approval = Risk.WRITE, ApprovalMode.NEVER
    idempotent = bool(remote.idempotent) and risk is not Risk.READ_ONLY
    retry_safe = risk is Risk.READ_ONLY or idempotent
    return {
        "risk": risk.value,
        "approval": approval.value,
        "idempotent": idempotent,
        "untrusted_output": bool(remote.open_world),
        "max_retries": 1 if retry_safe else 0,
    }


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def sanitise_name(raw: str) -> str:
    """``raw`` as an Agent Reach tool name: ^[a-z][a-z0-9_]{1,63}$."""
    name = _CAMEL.sub("_", raw).lower()
    name = re.sub(r"[^a-z0-9]+", "_", name).strip("_")
    if not name or not name[0].isalpha():
        name = f"tool_{name}".rstrip("_")
    if len(name) < 2:
        name = f"{name}_tool"
    return name[:64].rstrip("_")


def repair_schema(schema: Any) -> dict[str, Any]:
    """A valid object schema from what the server sent; ValueError if impossible.

    Repairs the minimal cases: no schema at all, a missing ``type``, missing or
    malformed ``properties``, ``required`` naming unknown parameters.
    """
    if not isinstance(schema, Mapping) or not schema:
        return {"type": "object", "properties": {}}
    repaired = dict(schema)
    if "type" not in repaired:
        repaired["type"] = "object"
    if repaired.get("type") != "object":
        raise ValueError(
            f"its input schema has type {repaired.get('type')!r}, not an object"
        )
    if not isinstance(repaired.get("properties"), Mapping):
        repaired["properties"] = {}
    required = repaired.get("required")
    if required is not None:
        if isinstance(required, list):
            known = [r for r in required if r in repaired["properties"]]
            if known:
                repaired["required"] = known
            else:
                repaired.pop("required")
        else:
            repaired.pop("required")
    check_parameters_schema(repaired)
    return repaired


class ImportStatus(StrEnum):
    """What importing one listed (or no longer listed) MCP tool did."""

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    #: Not imported: the listing or the registry refused it (the detail says why).
    SKIPPED = "skipped"
    #: Imported earlier; the server no longer lists it.
    GONE = "gone"


#: Outcomes an operator should look at.
IMPORT_WARNINGS = frozenset({ImportStatus.SKIPPED, ImportStatus.GONE})


@dataclass
class ImportOutcome:
    """What importing one MCP tool did."""

    remote: str
    tool: str
    status: ImportStatus
    detail: str = ""
    version: int | None = None
    warnings: list[str] = field(default_factory=list)

    def line(self) -> str:
        text = f"{self.status}: {self.remote} → {self.tool or '-'}"
        if self.version is not None:
            text += f" (v{self.version})"
        if self.detail:
            text += f" — {self.detail}"
        return text


def _free_name(wanted: str, server: MCPServer, remote: str, taken: set[str]) -> str:
    def free(name: str) -> bool:
        if name in taken:
            return False
        other = Tool.objects.filter(name=name).first()
        return other is None or (
            other.mcp_server_id == server.pk and other.mcp_tool == remote
        )

    if free(wanted):
        return wanted
    prefix = sanitise_name(server.name)
    candidate = f"{prefix}_{wanted}"[:64].rstrip("_")
    number = 2
    base = candidate
    while not free(candidate):
        suffix = f"_{number}"
        candidate = base[: 64 - len(suffix)] + suffix
        number += 1
    return candidate


def mcp_import_tools(
    *,
    server: MCPServer,
    user: Any = None,
    timeout_s: float = LIST_TIMEOUT_S,
    remote_tools: Sequence[RemoteTool] | None = None,
) -> list[ImportOutcome]:
    """Create or update one Tool per tool ``server`` lists.

    New tools start disabled and unconfirmed, with the policy their annotations
    suggest. A tool whose description or schema changed on the server (or whose
    annotations now ask for a stricter risk) gets a new version and, if it was
    confirmed, goes back to disabled and unconfirmed: a changed tool from outside
    the house is reviewed again before the model sees it. Raises MCPUnavailable.
    """
    if remote_tools is None:
        remote_tools = list_server_tools(server, timeout_s=timeout_s)
    outcomes: list[ImportOutcome] = []
    existing = {
        t.mcp_tool: t
        for t in Tool.objects.filter(kind=Tool.Kind.MCP, mcp_server=server)
    }
    taken: set[str] = set()
    listed: set[str] = set()
    for remote in remote_tools:
        listed.add(remote.name)
        try:
            offer = _offer(server, remote)
        except ValueError as exc:
            outcomes.append(
                ImportOutcome(remote.name, "", ImportStatus.SKIPPED, str(exc))
            )
            continue
        tool = existing.get(remote.name)
        try:
            with transaction.atomic():
                if tool is None:
                    outcome = _create(server, offer, taken, user)
                else:
                    outcome = _update(tool, offer, user)
        except ValidationError as exc:
            detail = "; ".join(
                f"{field}: {' '.join(messages)}"
                for field, messages in exc.message_dict.items()
            )
            outcomes.append(
                ImportOutcome(remote.name, "", ImportStatus.SKIPPED, detail)
            )
            continue
        taken.add(outcome.tool)
        outcomes.append(outcome)
    for remote_name, tool in sorted(existing.items()):
        if remote_name not in listed:
            outcomes.append(
                ImportOutcome(
                    remote_name,
                    tool.name,
                    ImportStatus.GONE,
                    "the server no longer lists this tool; disable or delete it",
                    tool.version,
                )
            )
    return outcomes


@dataclass(frozen=True)
class _Offer:
    """One listed tool as the registry would store it."""

    remote: RemoteTool
    description: str
    parameters: dict[str, Any]
    policy: dict[str, Any]


def _offer(server: MCPServer, remote: RemoteTool) -> _Offer:
    """Raises ``ValueError`` when the tool's input schema cannot be repaired."""
    description = (
        remote.description
        or remote.title
        or (
            f"{remote.name} (a tool of the MCP server {server.name}; it gave no "
            "description)."
        )
    )
    return _Offer(
        remote=remote,
        description=description,
        parameters=repair_schema(remote.input_schema),
        policy=default_policy(remote),
    )


def _create(
    server: MCPServer, offer: _Offer, taken: set[str], user: Any
) -> ImportOutcome:
    remote, policy = offer.remote, offer.policy
    name = _free_name(sanitise_name(remote.name), server, remote.name, taken)
    check_tool_name(name)
    tool = Tool(
        name=name,
        description=offer.description,
        parameters=offer.parameters,
        kind=Tool.Kind.MCP,
        mcp_server=server,
        mcp_tool=remote.name,
        enabled=False,
        confirmed=False,
        timeout_s=IMPORTED_TIMEOUT_S,
        tags=[server.name],
        **policy,
    )
    tool, _ = registry_services.tool_save(tool=tool, user=user)
    detail = "disabled until an operator confirms its policy"
    if name != sanitise_name(remote.name):
        detail = f"renamed to avoid a name clash; {detail}"
    return ImportOutcome(
        remote.name, tool.name, ImportStatus.CREATED, detail, tool.version
    )


def _update(tool: Tool, offer: _Offer, user: Any) -> ImportOutcome:
    remote, policy = offer.remote, offer.policy
    changed = (
        tool.description != offer.description or tool.parameters != offer.parameters
    )
    stricter = _RISK_RANK[Risk(policy["risk"])] > _RISK_RANK[Risk(tool.risk)]
    tool.description = offer.description
    tool.parameters = offer.parameters
    if not tool.confirmed or stricter:
        for key, value in policy.items():
            setattr(tool, key, value)
    review = tool.confirmed and (changed or stricter)
    if review:
        tool.confirmed = False
        tool.enabled = False
    tool, made = registry_services.tool_save(tool=tool, user=user)
    if not made:
        return ImportOutcome(
            remote.name, tool.name, ImportStatus.UNCHANGED, "", tool.version
        )
    detail = "definition changed on the server"
    if stricter:
        detail = f"annotations now suggest risk {policy['risk']}"
    if review:
        detail += "; disabled until an operator confirms it again"
    return ImportOutcome(
        remote.name, tool.name, ImportStatus.UPDATED, detail, tool.version
    )
