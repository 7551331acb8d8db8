"""Structured answers: an agent's final answer as a JSON object of its schema.

An agent may declare a JSON Schema for its final answer (``Agent.answer_schema``,
recorded in the run's agent snapshot as ``extra["answer_schema"]``). The loop
then asks every model call for it (:meth:`AnswerSchema.response_formats`: the
``json_schema`` response format, else ``json_object`` with the schema beside it,
which the built-in model follows under a grammar, else plain text), checks the
final answer against it (:meth:`AnswerSchema.check`), gives the model one
repair turn on a mismatch (:func:`repair_note`) and stops the run with
``bad_answer`` on a second one: :class:`AnswerFormat` makes the loop's model
calls, :func:`settle_answer` says what the loop does with a final answer.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .model_client import ModelClient, ModelError, ModelReply
from .model_steps import next_seq
from .spec import (
    AgentSnapshot,
    DetailKey,
    StepKind,
    StepRecord,
    StepStatus,
    StopReason,
    utcnow,
)

#: Where ``Task.agent_snapshot`` keeps the answer's schema.
ANSWER_SCHEMA_KEY = "answer_schema"
#: What a run records as its answer when the model's final reply was empty.
EMPTY_ANSWER = "(The model returned an empty answer.)"
#: The reason of the note that asks the model to repair its answer.
REPAIR_REASON = "bad_answer"
#: How many repair turns one run gets before it stops with ``bad_answer``.
REPAIR_TURNS = 1

_FENCED = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def response_formats(
    schema: dict[str, Any], name: str, *, strict: bool
) -> tuple[dict[str, Any] | None, ...]:
    """What to ask for, in turn, until the endpoint takes one: OpenAI's
    json_schema; then json_object with the schema beside it (llama-cpp-python's
    server, the built-in model, which follows it under a grammar); then plain
    text (the shape is still parsed and checked). Judges, guardrails'
    classifiers and structured answers all ask this way."""
    return (
        {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": schema, "strict": strict},
        },
        {"type": "json_object", "schema": schema},
        None,
    )


def complete_json(
    client: Any,
    messages: list[dict[str, str]],
    *,
    model: str,
    formats: Sequence[dict[str, Any] | None],
) -> str | None:
    """The content of ``client``'s reply to a request for JSON (no tools),
    asked in each of ``formats`` in turn until the endpoint takes one. Raises
    the ModelError of an endpoint that is down or refuses the request itself."""
    failure: ModelError | None = None
    for response_format in formats:
        try:
            reply = client.complete(
                messages=messages,
                tools=[],
                model=model,
                response_format=response_format,
            )
        except ModelError as exc:
            failure = exc
            if "response_format" not in str(exc):
                break  # down, or refusing the request itself: no other format helps
            continue
        content: str | None = reply.content
        return content
    assert failure is not None
    raise failure


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is no usable answer schema (None: it is one)."""
    if not isinstance(schema, Mapping) or not schema:
        return "An answer schema is a JSON Schema object."
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return f"Not a valid JSON Schema: {exc.message}"
    return None


@dataclass(frozen=True)
class AnswerSchema:
    schema: Mapping[str, Any]

    @classmethod
    def from_snapshot(cls, extra: Mapping[str, Any]) -> AnswerSchema | None:
        schema = extra.get(ANSWER_SCHEMA_KEY)
        if schema_problem(schema) is not None:
            return None
        assert isinstance(schema, Mapping)
        return cls(schema=dict(schema))

    def response_formats(self) -> tuple[dict[str, Any] | None, ...]:
        # Not strict: OpenAI's strict mode refuses schemas with optional keys.
        return response_formats(dict(self.schema), "answer", strict=False)

    def check(self, content: str) -> tuple[Any, str | None]:
        """The answer parsed, or None and what is wrong with it (for the model)."""
        text = content.strip()
        fenced = _FENCED.match(text)
        if fenced:
            text = fenced.group(1)
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            return None, f"The answer is not JSON ({exc.msg} at character {exc.pos})."
        errors = sorted(
            Draft202012Validator(self.schema).iter_errors(value),
            key=lambda e: list(e.absolute_path),
        )
        if errors:
            where = "/".join(str(p) for p in errors[0].absolute_path) or "(the top)"
            return None, f"At {where}: {errors[0].message}"
        return value, None


def repairs_used(steps: list[StepRecord]) -> int:
    """How many repair turns the run has had."""
    return sum(
        1
        for s in steps
        if s.kind is StepKind.NOTE and s.detail.get(DetailKey.REASON) == REPAIR_REASON
    )


def repair_note(seq: int, problem: str, schema: Mapping[str, Any]) -> StepRecord:
    """The note that gives the model its repair turn: what was wrong, and the
    schema again."""
    now = utcnow()
    text = (
        "Your final answer does not match the required JSON Schema. "
        f"{problem} Answer again with only a JSON value that matches this schema: "
        f"{json.dumps(schema, ensure_ascii=False)}"
    )
    return StepRecord(
        seq=seq,
        kind=StepKind.NOTE,
        status=StepStatus.SUCCEEDED,
        started_at=now,
        finished_at=now,
        detail={DetailKey.TEXT: text, DetailKey.REASON: REPAIR_REASON},
    )


def bad_answer_message(problem: str) -> str:
    return (
        "Stopped: the answer did not match the agent's answer schema after a "
        f"repair turn. {problem}"
    )


class AnswerFormat:
    """The run's model calls that ask for the answer's schema, and which of its
    response formats the endpoint takes (the first until one is refused; the
    last, plain text, for a client that takes none)."""

    def __init__(self, schema: AnswerSchema, client: ModelClient) -> None:
        self.schema = schema
        self._formats = schema.response_formats()
        self._at = 0 if takes_response_format(client) else len(self._formats) - 1

    @classmethod
    def of(
        cls, agent: AgentSnapshot | None, client: ModelClient
    ) -> AnswerFormat | None:
        """The format of the answer ``agent`` (the run's snapshot) declares;
        None when it declares none (the answer is plain text)."""
        schema = (
            AnswerSchema.from_snapshot(agent.extra)
            if agent is not None and agent.extra
            else None
        )
        return cls(schema, client) if schema is not None else None

    def complete(self, client: ModelClient, **request: Any) -> ModelReply:
        """A model call that asks for the answer's schema: the first response
        format the endpoint takes (a refused one is not asked for again)."""
        while True:
            chosen = self._formats[self._at]
            if chosen is None:
                return client.complete(**request)
            try:
                # Only a client that takes it gets here (takes_response_format).
                complete: Callable[..., ModelReply] = client.complete
                return complete(**request, response_format=chosen)
            except ModelError as exc:
                if "response_format" not in str(exc):
                    raise
                self._at += 1


def takes_response_format(client: ModelClient) -> bool:
    """Whether ``client.complete`` takes a ``response_format`` (the openai
    client does; :class:`ModelClient` itself does not promise it)."""
    try:
        parameters = inspect.signature(client.complete).parameters
    except (TypeError, ValueError):
        return False
    return "response_format" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


@dataclass(frozen=True)
class Settled:
    """What the loop does with a final answer checked against its schema: give
    the model its repair turn (``note``), else finish the run as the rest says
    (the answer and its parsed ``value``, or ``bad_answer`` and why)."""

    reason: StopReason
    answer: str | None = None
    message: str | None = None
    value: Any = None
    note: StepRecord | None = None


def settle_answer(
    schema: AnswerSchema | None, answer: str, steps: list[StepRecord]
) -> Settled:
    """The final ``answer`` (redacted, stripped) checked against ``schema`` (None:
    any answer will do): one repair turn on a mismatch, then ``bad_answer``."""
    if schema is None:
        return Settled(
            StopReason.FINAL_ANSWER,
            answer=answer or EMPTY_ANSWER,
        )
    value, problem = schema.check(answer)
    if problem is None:
        return Settled(StopReason.FINAL_ANSWER, answer=answer, value=value)
    if repairs_used(steps) < REPAIR_TURNS:
        note = repair_note(next_seq(steps), problem, schema.schema)
        return Settled(StopReason.BAD_ANSWER, note=note)
    return Settled(StopReason.BAD_ANSWER, message=bad_answer_message(problem))
