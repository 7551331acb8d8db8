"""A final answer never carries the handler's call syntax or a schema.

The 1.5B model sometimes writes its call as prose (``functions calculate: 128 *
6 + 320``) or answers with a tool's JSON schema (docs/stack-notes.md, "The built-in
model"). ``find_leak`` is pure; the handler test drives
``reach_tools_chat_handler`` with a stand-in for llama-cpp's ``Llama`` (the real
grammar class, no weights).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from localmodel.chatformat import find_leak
from tests.support.openai_tools import function_tool, object_schema

CALCULATE = function_tool(
    "calculate",
    object_schema({"expression": {"type": "string"}}, required=["expression"]),
)
SEARCH = function_tool(
    "search_notes",
    object_schema({"query": {"type": "string"}}, required=["query"]),
)
TICKET = function_tool(
    "create_ticket",
    object_schema(
        {"title": {"type": "string"}, "priority": {"type": "string"}},
        required=["title", "priority"],
    ),
)
TOOLS = [CALCULATE, SEARCH, TICKET]


def arguments(leak: Any) -> dict[str, Any]:
    return json.loads(leak.call["function"]["arguments"])


def test_a_call_written_as_prose_becomes_the_call_it_spells_out():
    leak = find_leak("functions calculate: 128 * 6 + 320", TOOLS)
    assert leak is not None and leak.call["function"]["name"] == "calculate"
    assert arguments(leak) == {"expression": "128 * 6 + 320"}


def test_a_call_with_json_arguments_inside_an_answer_becomes_that_call():
    leak = find_leak('好的。\nfunctions.search_notes: {"query": "缓存 预算"}', TOOLS)
    assert leak is not None and arguments(leak) == {"query": "缓存 预算"}


def test_a_json_call_object_as_the_answer_becomes_the_call():
    answer = '```json\n{"name": "calculate", "arguments": {"expression": "2+2"}}\n```'
    leak = find_leak(answer, TOOLS)
    assert leak is not None and arguments(leak) == {"expression": "2+2"}


def test_a_schema_as_the_answer_is_a_leak_without_a_call():
    schema = json.dumps(TICKET["function"]["parameters"])
    leak = find_leak(schema, TOOLS)
    assert leak is not None and leak.call is None and leak.name is None


def test_a_tool_with_several_required_parameters_is_named_but_not_guessed():
    leak = find_leak("functions create_ticket: the cache is slow", TOOLS)
    assert leak is not None and leak.name == "create_ticket" and leak.call is None


@pytest.mark.parametrize(
    "answer",
    [
        "The search notes function did not return any results.",
        "Redis 缓存改造 的预算总和是 1088。",
        "Use the calculate tool next time: 2 + 2 = 4.",
        '{"total": 1088}',
        "",
    ],
)
def test_plain_answers_are_left_alone(answer):
    assert find_leak(answer, TOOLS) is None


def test_an_unknown_name_is_not_taken_for_a_call():
    assert find_leak("functions delete_everything: now", TOOLS) is None


class StandInLlama:
    """What the handler uses of ``llama_cpp.Llama``: tokenize, n_ctx and
    create_completion, answering each call with the next scripted text."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = list(texts)
        self.grammars: list[Any] = []
        #: Every piece of prompt text the handler tokenized, in order.
        self.read: list[bytes] = []
        #: The prompt text each generation read (what was tokenized for it).
        self.prompts: list[bytes] = []
        self._asked = 0  # pieces of ``read`` the generations so far took

    def tokenize(self, data: bytes, add_bos: bool = False, special: bool = False):
        self.read.append(data)
        return list(range(len(data) // 4 + 1))

    def n_ctx(self) -> int:
        return 32768

    def create_completion(self, *, prompt, grammar=None, **_: Any) -> dict[str, Any]:
        self.prompts.append(b"".join(self.read[self._asked :]))
        self._asked = len(self.read)
        self.grammars.append(grammar)
        return {
            "id": f"cmpl-{len(self.grammars)}",
            "created": 0,
            "model": "local",
            "choices": [{"text": self.texts.pop(0), "finish_reason": "stop"}],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": 5},
        }


OPEN_A_TICKET = [
    {"role": "user", "content": "缓存很慢，开个工单"},
    {"role": "assistant", "content": "好的"},
    {"role": "user", "content": "现在就开"},
]


def ask(
    monkeypatch: pytest.MonkeyPatch,
    texts: list[str],
    *,
    assistant: bool,
    messages: list[dict[str, Any]] = OPEN_A_TICKET,
) -> tuple[dict[str, Any], StandInLlama]:
    """The handler's answer to ``messages`` when the model writes ``texts`` in
    turn (assistant mode on or off), and the stand-in that recorded the asks."""
    pytest.importorskip("llama_cpp")
    from localmodel.handler import reach_tools_chat_handler

    monkeypatch.setattr("localmodel.handler.TOOL_FIRST", assistant, raising=False)
    llama = StandInLlama(texts)
    result = reach_tools_chat_handler(
        llama=llama,  # type: ignore[arg-type]
        messages=messages,
        tools=TOOLS,
        tool_choice="auto",
    )
    return result, llama


def test_the_handler_makes_the_call_a_prose_answer_spells_out(monkeypatch):
    result, llama = ask(
        monkeypatch, ["message: functions calculate: 19 * 23 - 7"], assistant=False
    )
    message = result["choices"][0]["message"]
    assert message.get("content") in (None, "")
    [call] = message["tool_calls"]
    assert call["function"]["name"] == "calculate"
    assert json.loads(call["function"]["arguments"]) == {"expression": "19 * 23 - 7"}
    assert result["choices"][0]["finish_reason"] == "tool_calls"
    assert len(llama.grammars) == 1


def test_the_handler_asks_again_for_a_call_of_the_tool_a_leak_names(monkeypatch):
    leak = "message: functions create_ticket: the cache is slow"
    call = 'functions.create_ticket:\n{"title": "缓存很慢", "priority": "high"}'
    result, llama = ask(monkeypatch, [leak, call], assistant=False)
    message = result["choices"][0]["message"]
    [call] = message["tool_calls"]
    assert call["function"]["name"] == "create_ticket"
    assert json.loads(call["function"]["arguments"])["priority"] == "high"
    assert "functions" not in (message.get("content") or "")
    # The second generation was held to a call (a grammar), and both are counted.
    assert len(llama.grammars) == 2 and llama.grammars[1] is not None
    assert result["usage"]["completion_tokens"] == 10


AFTER_A_SEARCH = [
    {"role": "user", "content": "搜索实验这个方案的预算总和是多少？"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {
                    "name": "search_notes",
                    "arguments": '{"query": "搜索实验"}',
                },
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "c1",
        "content": '[{"title": "搜索实验", "content": "预算表达式为 500 + 240。"}]',
    },
]


def test_a_sum_done_in_the_models_head_is_asked_again_as_a_call(monkeypatch):
    guess = "message:\n搜索实验的预算总和是 740。"
    call = 'functions.calculate:\n{"expression": "500 + 240"}'
    result, llama = ask(
        monkeypatch, [guess, call], assistant=True, messages=AFTER_A_SEARCH
    )
    message = result["choices"][0]["message"]
    [call] = message["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"expression": "500 + 240"}
    assert not message.get("content")
    assert len(llama.grammars) == 2 and result["usage"]["completion_tokens"] == 10


AFTER_A_SUM = [
    *AFTER_A_SEARCH,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c2",
                "type": "function",
                "function": {
                    "name": "calculate",
                    "arguments": '{"expression": "500 + 240"}',
                },
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "c2",
        "content": '{"expression": "500 + 240", "result": 740}',
    },
]


@pytest.mark.parametrize(
    ("assistant", "messages", "answer", "shown"),
    [
        # It quotes its result and names the note: left as it is.
        (
            True,
            AFTER_A_SUM,
            "搜索实验的预算总和是 500 + 240 = 740。",
            "搜索实验的预算总和是 500 + 240 = 740。",
        ),
        # It names no note: the one it used is named for it.
        (
            True,
            AFTER_A_SUM,
            "预算总和是 740。",
            "预算总和是 740。\n\n来源：搜索实验",
        ),
        # The server alone (no assistant mode) lets a sum from nowhere be, and an
        # expression it did not work out.
        (
            False,
            AFTER_A_SEARCH,
            "搜索实验的预算总和是 740。",
            "搜索实验的预算总和是 740。",
        ),
        (False, AFTER_A_SEARCH, "预算表达式为 500 + 240。", "预算表达式为 500 + 240。"),
    ],
)
def test_an_answer_is_asked_once_and_shown_as_the_assistant_would(
    monkeypatch, assistant, messages, answer, shown
):
    result, llama = ask(
        monkeypatch,
        [f"message:\n{answer}"],
        assistant=assistant,
        messages=messages,
    )
    message = result["choices"][0]["message"]
    assert message["content"] == shown
    assert len(llama.grammars) == 1


class SmallWindowLlama(StandInLlama):
    def n_ctx(self) -> int:
        return 8


def test_a_prompt_longer_than_the_window_is_a_400_that_clients_do_not_retry():
    pytest.importorskip("llama_cpp")
    from llama_cpp.server.errors import RouteErrorHandler

    from localmodel.handler import reach_tools_chat_handler

    with pytest.raises(ValueError) as refused:
        reach_tools_chat_handler(
            llama=SmallWindowLlama([]),  # type: ignore[arg-type]
            messages=OPEN_A_TICKET,
            tools=TOOLS,
            tool_choice="auto",
        )

    # What the server (llama_cpp.server) answers for that error.
    answers = [
        formatter(SimpleNamespace(max_tokens=None, messages=[]), match)
        for pattern, formatter in RouteErrorHandler.pattern_and_formatters.items()
        if (match := pattern.search(str(refused.value)))
    ]
    assert len(answers) == 1, str(refused.value)
    status, body = answers[0]
    assert status == 400 and body["code"] == "context_length_exceeded"
    assert "maximum context length is 8 tokens" in body["message"]
