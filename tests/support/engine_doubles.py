"""Engine test doubles, without Django: a model in-process, tools and a journal.

``FakeModel`` plays a ``Script`` of the shared reply vocabulary
(``tests.support.replies``) in-process, the way ``ScriptedModel`` plays it over
HTTP; its call ids are ``call_<index>_<name>``, the same every turn.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from engine.execution import Executor
from engine.loop import Engine
from engine.memory_journal import MemoryJournal
from engine.model_client import ModelError, ModelReply, parse_message
from engine.spec import (
    Attempt,
    Limits,
    StepKind,
    StepRecord,
    Toolbox,
    ToolSpec,
    Usage,
    utcnow,
)
from tests.support.openai_tools import object_schema
from tests.support.replies import Reply, Script, ScriptStep

#: ``prompt_tokens(messages)`` -> the prompt tokens a model reports.
PromptTokens = Callable[[Sequence[dict[str, Any]]], int]


def _raise(exc: Exception) -> Callable[[dict[str, Any]], Reply]:
    def step(request: dict[str, Any]) -> Reply:
        raise exc

    return step


def content_tokens(messages: Sequence[dict[str, Any]]) -> int:
    """Prompt tokens the way the scripted server counts them: content chars / 4."""
    return sum(len(str(m.get("content") or "")) for m in messages) // 4 + 1


class FakeModel:
    """Answers with scripted replies in order; records what it was sent.

    A step is a reply, a ``callable(request) -> reply`` (as in ``Script``) or an
    exception, raised as the model client would raise it (``model_error()``).
    """

    def __init__(
        self,
        replies: Sequence[ScriptStep | Exception],
        *,
        prompt_tokens: int | PromptTokens = 10,
        completion_tokens: int = 5,
    ) -> None:
        self.script = Script(
            _raise(step) if isinstance(step, Exception) else step for step in replies
        )
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens

    @property
    def requests(self) -> list[list[dict[str, Any]]]:
        """The messages of every request, in order."""
        return [request["messages"] for request in self.script.requests]

    @property
    def tools_sent(self) -> list[list[dict[str, Any]]]:
        """The tools offered with every request, in order."""
        return [request["tools"] for request in self.script.requests]

    def complete(self, **request: Any) -> ModelReply:
        """``ModelClient.complete(messages=..., tools=..., model=...)``."""
        messages = [dict(m) for m in request["messages"]]
        model = request["model"]
        reply = self.script(
            {"model": model, "messages": messages, "tools": list(request["tools"])}
        )
        assert isinstance(reply, Reply), "no HTTP here: raise model_error() instead"
        assert not (reply.hang or reply.delay_s), (
            "FakeModel answers at once: wait on an Event in a callable step"
        )
        message = reply.message(lambda index, call: f"call_{index}_{call.name}")
        content, tool_calls = parse_message(message)
        prompt = (
            self.prompt_tokens(messages)
            if callable(self.prompt_tokens)
            else self.prompt_tokens
        )
        usage = Usage(prompt, self.completion_tokens, prompt + self.completion_tokens)
        if reply.usage != "counted":
            # As the real client reads a usage object (none: not reported).
            usage = Usage.from_dict(
                reply.usage if isinstance(reply.usage, dict) else None
            )
        return ModelReply(
            message=message,
            content=content,
            tool_calls=tool_calls,
            finish_reason=reply.finish_reason,
            usage_reported=bool(usage.prompt_tokens or usage.completion_tokens),
            usage=usage,
            request_id=f"req-{len(self.script.requests)}",
            model=model,
            latency_ms=1.0,
            attempts=[Attempt(1, utcnow().isoformat(), 1.0)],
        )


class Hanging:
    """Blocks until ``release()``, then returns ``result``.

    A tool handler (``handler(arguments, context)``) or a model step
    (``Hanging(text("late"))``, called with the request); ``asked`` is set at the
    first call, ``started`` keeps the ``x`` argument of every call.
    """

    def __init__(self, result: Any = "late") -> None:
        self.result = result
        self.asked = threading.Event()
        self.started: list[Any] = []
        self._released = threading.Event()

    def __call__(self, arguments: dict[str, Any], context: Any = None) -> Any:
        self.started.append(arguments.get("x"))
        self.asked.set()
        self._released.wait(30)
        return self.result

    def release(self) -> None:
        self._released.set()


def model_error(kind: str = "connection") -> ModelError:
    return ModelError("The model is down.", kind=kind, attempts=[])


def spec(name: str, **overrides: Any) -> ToolSpec:
    parameters = overrides.pop(
        "parameters",
        object_schema({"x": {"type": "string"}}, ["x"], additionalProperties=False),
    )
    return ToolSpec(
        name=name, description=f"The {name} tool.", parameters=parameters, **overrides
    )


def calculator_spec() -> ToolSpec:
    return spec(
        "calculate",
        parameters=object_schema(
            {"expression": {"type": "string"}},
            ["expression"],
            additionalProperties=False,
        ),
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


def calculator() -> dict[str, tuple[ToolSpec, Callable[..., Any]]]:
    """The ``calculate`` tool, as ``make_engine`` takes tools."""
    return {"calculate": (calculator_spec(), calculate_handler)}


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


def steps_of(j: MemoryJournal, kind: StepKind) -> list[StepRecord]:
    """The journal's steps of one kind, in order."""
    return [s for s in j.steps if s.kind is kind]


def tool_steps(j: MemoryJournal) -> list[StepRecord]:
    return steps_of(j, StepKind.TOOL_CALL)


def model_calls(j: MemoryJournal) -> list[StepRecord]:
    return steps_of(j, StepKind.MODEL_CALL)


def advanced(
    model: FakeModel,
    tools: dict[str, tuple[ToolSpec, Callable[..., Any]]],
    **engine_options: Any,
) -> MemoryJournal:
    """A fresh ``journal()`` advanced once by ``make_engine(model, tools, ...)``."""
    j = journal()
    make_engine(model, tools, **engine_options).advance(j)
    return j
