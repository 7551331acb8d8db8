"""The deterministic "model" of a gateway run: one proposed call, then its result.

The MCP client already decided which tool to call with which arguments; the
engine still has to validate, check policy, park, run and record it. So the
run's model is this client: its first turn proposes exactly the requested call,
its next turn (after the engine fed the observation back) finishes with the
tool message as the answer. It reads its state from the messages, not from
memory, because a run parked for approval resumes on whichever worker claims it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.model_client import (
    Messages,
    ModelClient,
    ModelReply,
    Tools,
    assistant_message,
)
from engine.spec import AgentSnapshot, Attempt, ToolCall, Usage, utcnow
from runs.ports import GATEWAY_KEY

#: What a gateway run records as its model: no language model answered.
GATEWAY_MODEL = "mcp-gateway"


@dataclass(frozen=True)
class GatewayCall:
    """The one call an MCP client asked for, as the task's snapshot records it."""

    tool: str
    arguments: Mapping[str, Any]
    call_id: str

    def to_json(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "arguments": dict(self.arguments),
            "call_id": self.call_id,
        }

    @classmethod
    def from_json(cls, data: Any) -> GatewayCall | None:
        if not isinstance(data, Mapping) or not isinstance(data.get("tool"), str):
            return None
        arguments = data.get("arguments")
        return cls(
            tool=data["tool"],
            arguments=dict(arguments) if isinstance(arguments, Mapping) else {},
            call_id=str(data.get("call_id") or "mcp_call"),
        )


class GatewayModel:
    """A :class:`~engine.model_client.ModelClient` that plays one gateway call."""

    def __init__(self, call: GatewayCall) -> None:
        self.call = call

    def complete(self, *, messages: Messages, tools: Tools, model: str) -> ModelReply:
        observed = next(
            (
                m
                for m in reversed(messages)
                if m.get("role") == "tool"
                and m.get("tool_call_id") == self.call.call_id
            ),
            None,
        )
        tool_calls: list[ToolCall] = []
        if observed is None:
            content = None
            tool_calls.append(
                ToolCall(
                    call_id=self.call.call_id,
                    name=self.call.tool,
                    # As a model sends them: a JSON string the engine parses and
                    # validates like any other proposal.
                    raw_arguments=json.dumps(
                        dict(self.call.arguments), ensure_ascii=False
                    ),
                    index=0,
                )
            )
            finish = "tool_calls"
        else:
            content = str(observed.get("content"))
            finish = "stop"
        message = assistant_message(content, tool_calls)
        return ModelReply(
            message=message,
            content=content,
            tool_calls=tool_calls,
            finish_reason=finish,
            usage=Usage(0, 0, 0),
            request_id=None,
            model=GATEWAY_MODEL,
            latency_ms=0.0,
            attempts=[Attempt(1, utcnow().isoformat(), 0.0)],
        )


def gateway_model(*, snapshot: AgentSnapshot) -> ModelClient | None:
    """The provider of ``runs.ports.model_for``: a gateway run's client, else None."""
    call = GatewayCall.from_json(snapshot.extra.get(GATEWAY_KEY))
    return GatewayModel(call) if call is not None else None
