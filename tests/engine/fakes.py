"""Engine test doubles: a scripted in-process model and simple toolboxes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from engine.execution import Executor
from engine.loop import Engine
from engine.memory import MemoryJournal
from engine.model_client import ModelError, ModelReply, parse_message
from engine.spec import (
    ApprovalMode,
    Attempt,
    Limits,
    Risk,
    Toolbox,
    ToolSpec,
    Usage,
    utcnow,
)

Reply = dict[str, Any]


def text(content: str) -> Reply:
    return {"role": "assistant", "content": content}


def calls(*items: tuple[str, Any]) -> Reply:
    tool_calls = []
    for index, (name, arguments) in enumerate(items):
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        tool_calls.append(
            {
                "id": f"call_{index}_{name}",
                "type": "function",
                "function": {"name": name, "arguments": raw},
            }
        )
    return {"role": "assistant", "content": None, "tool_calls": tool_calls}


def call(name: str, arguments: Any) -> Reply:
    return calls((name, arguments))


class FakeModel:
    """Answers with scripted replies in order; records what it was sent."""

    def __init__(
        self,
        replies: Sequence[Reply | Exception | Callable[[list[dict[str, Any]]], Reply]],
        *,
        prompt_tokens: int = 10,
        completion_tokens: int = 5,
        delay_s: float = 0.0,
    ) -> None:
        self.replies = list(replies)
        self.requests: list[list[dict[str, Any]]] = []
        self.tools_sent: list[list[dict[str, Any]]] = []
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.delay_s = delay_s
        self._lock = threading.Lock()

    def complete(
        self,
        *,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        model: str,
    ) -> ModelReply:
        with self._lock:
            self.requests.append([dict(m) for m in messages])
            self.tools_sent.append(list(tools))
            reply = self.replies.pop(0) if self.replies else text("(script exhausted)")
        if self.delay_s:
            time.sleep(self.delay_s)
        if isinstance(reply, Exception):
            raise reply
        if callable(reply):
            reply = reply(list(messages))
        content, tool_calls = parse_message(reply)
        usage = Usage(
            self.prompt_tokens,
            self.completion_tokens,
            self.prompt_tokens + self.completion_tokens,
        )
        return ModelReply(
            message=reply,
            content=content,
            tool_calls=tool_calls,
            finish_reason="tool_calls" if tool_calls else "stop",
            usage=usage,
            request_id=f"req-{len(self.requests)}",
            model=model,
            latency_ms=1.0,
            attempts=[Attempt(1, utcnow().isoformat(), 1.0)],
        )


def model_error(kind: str = "connection") -> ModelError:
    return ModelError("The model is down.", kind=kind, attempts=[])


def spec(name: str, **overrides: Any) -> ToolSpec:
    parameters = overrides.pop(
        "parameters",
        {
            "type": "object",
            "properties": {"x": {"type": "string"}},
            "required": ["x"],
            "additionalProperties": False,
        },
    )
    return ToolSpec(
        name=name, description=f"The {name} tool.", parameters=parameters, **overrides
    )


def calculator_spec() -> ToolSpec:
    return spec(
        "calculate",
        parameters={
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
            "additionalProperties": False,
        },
    )


def calculate_handler(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
    from engine.execution import ToolError
    from engine.safe_eval import EvaluationError, evaluate_arithmetic

    try:
        return {
            "expression": arguments["expression"],
            "result": evaluate_arithmetic(arguments["expression"]),
        }
    except EvaluationError as exc:
        raise ToolError(str(exc)) from exc


def make_engine(
    model: FakeModel,
    tools: dict[str, tuple[ToolSpec, Callable[..., Any]]],
    *,
    limits: Limits | None = None,
    executor: Executor | None = None,
) -> Engine:
    toolbox = Toolbox(
        specs={name: s for name, (s, _) in tools.items()},
        handlers={name: h for name, (_, h) in tools.items()},
    )
    return Engine(
        model_client=model,
        toolbox=toolbox,
        executor=executor or Executor(max_threads=8, backoff_base_s=0.001),
        limits=limits or Limits(),
    )


def journal(goal: str = "What is 128 * 6 + 320?", **kwargs: Any) -> MemoryJournal:
    return MemoryJournal(task_id="t1", goal=goal, **kwargs)


__all__ = [
    "ApprovalMode",
    "FakeModel",
    "Risk",
    "call",
    "calls",
    "calculate_handler",
    "calculator_spec",
    "journal",
    "make_engine",
    "model_error",
    "spec",
    "text",
]
