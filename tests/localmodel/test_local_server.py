"""End to end through the real local model: the server subprocess, the real
``openai`` SDK, temperature 0.

Skipped when llama-cpp-python or the verified weights are not installed
(``python -m localmodel.install``).
"""

from __future__ import annotations

import ast
import json
import operator
import time
from typing import Any

import pytest

from localmodel import MODEL_ALIAS
from tests.support.cast import QUESTION, REDIS_NOTES
from tests.support.openai_tools import function_tool, object_schema

# A few seconds per request on an idle machine; minutes when other processes
# compete for the two cores, hence the generous limits.
pytestmark = [pytest.mark.localmodel, pytest.mark.timeout(1800)]

REQUEST_TIMEOUT_SECONDS = 600.0

TOOLS: list[dict[str, Any]] = [
    function_tool(
        "search_notes",
        object_schema(
            {"keyword": {"type": "string", "description": "the keyword"}}, ["keyword"]
        ),
        "Search the team's project notes by keyword",
    ),
    function_tool(
        "calculate",
        object_schema(
            {
                "expression": {
                    "type": "string",
                    "description": "the arithmetic expression",
                }
            },
            ["expression"],
        ),
        "Evaluate an arithmetic expression",
    ),
]
NOTES = REDIS_NOTES

_OPERATORS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
}


def evaluate(expression: str) -> float:
    """Evaluate plain arithmetic (numbers, + - * /, parentheses) safely."""

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return float(_OPERATORS[type(node.op)](walk(node.left), walk(node.right)))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return float(_OPERATORS[type(node.op)](walk(node.operand)))
        raise ValueError(f"not plain arithmetic: {expression!r}")

    return walk(ast.parse(expression.replace("×", "*"), mode="eval").body)


@pytest.fixture(scope="session")
def client(local_model_url: str) -> Any:
    from openai import OpenAI

    return OpenAI(
        base_url=local_model_url,
        api_key="local",
        timeout=REQUEST_TIMEOUT_SECONDS,
        max_retries=0,
    )


def ask(client: Any, messages: list[dict[str, Any]], *, tools: bool = True) -> Any:
    """One chat completion at temperature 0 (tool_choice auto whenever tools go)."""
    options: dict[str, Any] = {"tools": TOOLS, "tool_choice": "auto"} if tools else {}
    started = time.monotonic()
    response = client.chat.completions.create(
        model=MODEL_ALIAS, messages=messages, temperature=0, **options
    )
    message = response.choices[0].message
    calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or ()]
    print(
        f"{time.monotonic() - started:5.1f}s  "
        f"prompt {response.usage.prompt_tokens} / "
        f"completion {response.usage.completion_tokens} tokens  "
        f"{calls or repr(message.content)}"
    )
    return response


def test_models_endpoint_lists_the_local_model(client: Any) -> None:
    assert [model.id for model in client.models.list().data] == [MODEL_ALIAS]


def test_redis_question_searches_then_calculates_then_answers(client: Any) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]

    first = ask(client, messages)
    assert first.choices[0].finish_reason == "tool_calls"
    [search] = first.choices[0].message.tool_calls
    assert search.function.name == "search_notes"
    assert "redis" in json.loads(search.function.arguments)["keyword"].lower()
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append(
        {
            "role": "tool",
            "tool_call_id": search.id,
            "content": json.dumps(NOTES, ensure_ascii=False),
        }
    )

    second = ask(client, messages)
    assert second.choices[0].finish_reason == "tool_calls"
    [calculation] = second.choices[0].message.tool_calls
    assert calculation.function.name == "calculate"
    expression = json.loads(calculation.function.arguments)["expression"]
    assert evaluate(expression) == 1088
    messages.append(second.choices[0].message.model_dump(exclude_none=True))
    messages.append(
        {
            "role": "tool",
            "tool_call_id": calculation.id,
            "content": json.dumps({"expression": expression, "result": 1088}),
        }
    )

    third = ask(client, messages)
    answer = third.choices[0].message
    assert third.choices[0].finish_reason == "stop"
    assert not answer.tool_calls
    assert "1088" in (answer.content or "").replace(",", "")


def test_greeting_gets_a_text_answer_without_tool_calls(client: Any) -> None:
    response = ask(client, [{"role": "user", "content": "你好！"}])
    message = response.choices[0].message
    assert response.choices[0].finish_reason == "stop"
    assert not message.tool_calls
    assert message.content and message.content.strip()


def test_plain_chat_without_tools_answers_in_text(client: Any) -> None:
    response = ask(
        client,
        [{"role": "user", "content": "What is 2 + 3? Reply briefly."}],
        tools=False,
    )
    assert "5" in (response.choices[0].message.content or "")
