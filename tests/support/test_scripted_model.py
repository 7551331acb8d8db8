"""The scripted model server, driven by the real ``openai`` SDK over loopback."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import openai
import pytest

from tests.support.cast import QUESTION, REDIS_NOTES
from tests.support.openai_tools import function_tool, object_schema
from tests.support.replies import (
    Handler,
    Script,
    delay,
    error,
    hang,
    text,
    tool_call,
    tool_calls,
)
from tests.support.scripted_model import (
    MODEL_ID,
    EchoScript,
    RedisScript,
    ScriptedModel,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTES = REDIS_NOTES
TOOLS: list[dict[str, Any]] = [
    function_tool(
        name,
        object_schema({field: {"type": "string"}}, [field]),
        f"the {name} tool",
    )
    for name, field in (("search_notes", "keyword"), ("calculate", "expression"))
]


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[ScriptedModel, openai.OpenAI]]]:
    """``serve(handler, **server_options)`` → a started server and a client."""
    started: list[ScriptedModel] = []

    def start(
        handler: Handler | None = None, *, timeout: float = 10.0, **options: Any
    ) -> tuple[ScriptedModel, openai.OpenAI]:
        model = ScriptedModel(handler, **options).start()
        started.append(model)
        client = openai.OpenAI(
            base_url=model.base_url, api_key="test", max_retries=0, timeout=timeout
        )
        return model, client

    yield start
    for model in started:
        model.stop()


def ask(client: openai.OpenAI, messages: list[dict[str, Any]], **extra: Any) -> Any:
    """One chat completion for ``messages`` (plain dicts, as the engine sends)."""
    return client.chat.completions.create(
        model="gpt-test", messages=cast(Any, messages), **extra
    )


def user(content: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": content}]


# Replies ----------------------------------------------------------------------


def test_text_reply(serve: Callable[..., Any]) -> None:
    model, client = serve(Script([text("hello")]))
    assert model.base_url == f"http://127.0.0.1:{model.port}/v1"

    completion = ask(client, user("hi"))

    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "gpt-test"
    assert completion.created > 0
    choice = completion.choices[0]
    assert choice.index == 0
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert choice.message.content == "hello"
    assert choice.message.tool_calls is None
    assert completion.usage is not None
    # "hi" → 2 // 4 + 1, "hello" → 5 // 4 + 1
    assert completion.usage.prompt_tokens == 1
    assert completion.usage.completion_tokens == 2
    assert completion.usage.total_tokens == 3


def test_tool_call_reply_is_parsed_by_the_sdk(serve: Callable[..., Any]) -> None:
    _, client = serve(Script([tool_call("search_notes", {"keyword": "缓存"})]))

    completion = ask(client, user("find"), tools=TOOLS)

    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert call.id.startswith("call_")
    assert call.function.name == "search_notes"
    assert call.function.arguments == '{"keyword": "缓存"}'  # not \\u-escaped
    assert json.loads(call.function.arguments) == {"keyword": "缓存"}


def test_several_tool_calls_raw_arguments_and_fixed_ids(
    serve: Callable[..., Any],
) -> None:
    reply = tool_calls(
        [("calculate", {"expression": "1 + 1"}), ("search_notes", "{not json", "c9")]
    )
    _, client = serve(Script([reply, reply]))

    first = ask(client, user("go")).choices[0].message.tool_calls
    second = ask(client, user("go")).choices[0].message.tool_calls

    assert [c.function.name for c in first] == ["calculate", "search_notes"]
    assert first[1].function.arguments == "{not json"
    assert first[1].id == second[1].id == "c9"
    assert first[0].id != second[0].id  # ids made per answer stay unique


def test_request_id_header_matches_sdk_request_id(serve: Callable[..., Any]) -> None:
    _, client = serve(EchoScript())

    raw = client.chat.completions.with_raw_response.create(
        model="gpt-test", messages=user("ping")
    )
    completion = raw.parse()
    again = ask(client, user("ping"))

    header = raw.headers["x-request-id"]
    assert header.startswith("req_")
    assert completion._request_id == header
    assert again._request_id not in (None, header)
    assert completion.choices[0].message.content == "echo: ping"


def test_models_endpoint_lists_the_scripted_model(serve: Callable[..., Any]) -> None:
    _, client = serve()
    assert [m.id for m in client.models.list()] == [MODEL_ID]


# Errors and timing ------------------------------------------------------------


def test_error_replies_raise_the_sdk_exceptions(serve: Callable[..., Any]) -> None:
    _, client = serve(
        Script([error(429, "slow down", retry_after=3), error(500, "boom")])
    )

    with pytest.raises(openai.RateLimitError) as limited:
        ask(client, user("a"))
    with pytest.raises(openai.InternalServerError) as broken:
        ask(client, user("b"))

    assert limited.value.status_code == 429
    assert limited.value.response.headers["retry-after"] == "3"
    assert limited.value.code == "rate_limit_exceeded"
    assert limited.value.message.endswith("slow down")
    assert limited.value.request_id is not None
    assert broken.value.status_code == 500
    assert broken.value.type == "server_error"
    assert "boom" in broken.value.message


def test_a_raising_handler_becomes_a_500(serve: Callable[..., Any]) -> None:
    def broken(request: dict[str, Any]) -> Any:
        raise ValueError("bad script")

    _, client = serve(broken)
    with pytest.raises(openai.InternalServerError, match="bad script"):
        ask(client, user("a"))


def test_hang_hits_the_client_timeout_quickly(serve: Callable[..., Any]) -> None:
    model, client = serve(Script([hang(), text("after")]), timeout=0.5)

    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        ask(client, user("wait"))
    assert time.monotonic() - started < 3

    # The hanging request does not block the next one.
    assert ask(client, user("next")).choices[0].message.content == "after"
    started = time.monotonic()
    model.stop()
    assert time.monotonic() - started < 3


def test_delay_and_latency(serve: Callable[..., Any]) -> None:
    _, client = serve(Script([delay(0.3, text("late"))]), latency_s=0.1)

    started = time.monotonic()
    assert ask(client, user("x")).choices[0].message.content == "late"
    assert time.monotonic() - started >= 0.4


def test_parallel_requests_do_not_wait_for_each_other(
    serve: Callable[..., Any],
) -> None:
    _, client = serve(EchoScript(), latency_s=0.2)
    ask(client, user("warm up"))

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(
            pool.map(
                lambda n: ask(client, user(f"q{n}")).choices[0].message.content,
                range(20),
            )
        )
    elapsed = time.monotonic() - started

    assert answers == [f"echo: q{n}" for n in range(20)]
    assert elapsed < 2.0


# Script -----------------------------------------------------------------------


def test_script_records_requests_and_runs_out(serve: Callable[..., Any]) -> None:
    script = Script(
        [
            tool_call("calculate", {"expression": "2 * 3"}, call_id="call_a"),
            lambda request: text(f"{len(request['messages'])} messages"),
        ]
    )
    _, client = serve(script)

    first = ask(client, user("2 * 3?"), tools=TOOLS, tool_choice="auto")
    messages = [
        *user("2 * 3?"),
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call_a", "content": '{"result": 6}'},
    ]
    second = ask(client, messages, tools=TOOLS, tool_choice="auto")
    third = ask(client, user("more?"))

    assert second.choices[0].message.content == "3 messages"
    assert third.choices[0].message.content == "(script exhausted)"
    assert script.exhausted
    assert len(script.requests) == 3
    assert script.requests[0]["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in script.requests[0]["tools"]] == [
        "search_notes",
        "calculate",
    ]
    sent = script.requests[1]["messages"]
    assert sent[1]["tool_calls"][0]["id"] == "call_a"
    assert sent[2] == {
        "role": "tool",
        "tool_call_id": "call_a",
        "content": '{"result": 6}',
    }


# Validation -------------------------------------------------------------------

ASSISTANT_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "calculate", "arguments": '{"expression": "1"}'},
        }
    ],
}


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        ([], "messages"),
        ([*user("q"), ASSISTANT_CALL], "tool_call_ids did not have response"),
        (
            [*user("q"), ASSISTANT_CALL, *user("again")],
            "tool_call_ids did not have response",
        ),
        (
            [*user("q"), ASSISTANT_CALL, {"role": "tool", "content": "1"}],
            "tool_call_id",
        ),
        (
            [
                *user("q"),
                ASSISTANT_CALL,
                {"role": "tool", "tool_call_id": "call_other", "content": "1"},
            ],
            "does not match",
        ),
        (
            [*user("q"), {"role": "tool", "tool_call_id": "call_1", "content": "1"}],
            "preceeding message with 'tool_calls'",
        ),
    ],
)
def test_invalid_conversations_are_rejected(
    serve: Callable[..., Any], messages: list[dict[str, Any]], fragment: str
) -> None:
    script = Script([text("never")])
    model, client = serve(script)

    with pytest.raises(openai.BadRequestError) as rejected:
        ask(client, messages)

    assert rejected.value.status_code == 400
    assert fragment in rejected.value.message
    assert rejected.value.type == "invalid_request_error"
    assert script.requests == []  # the handler never saw it
    assert len(model.rejections) == 1


def test_a_complete_tool_round_is_accepted(serve: Callable[..., Any]) -> None:
    _, client = serve(Script([text("ok")]))
    messages = [
        *user("q"),
        ASSISTANT_CALL,
        {"role": "tool", "tool_call_id": "call_1", "content": "1"},
    ]
    assert ask(client, messages).choices[0].message.content == "ok"


def test_a_stream_carries_the_same_reply_in_pieces(
    serve: Callable[..., Any],
) -> None:
    reply = tool_call("search_notes", {"keyword": "Redis 缓存方案"})
    _, client = serve(
        Script([text("一二三四五六七八九十" * 4), reply]), stream_chunk_chars=8
    )
    chunks = list(
        ask(client, user("q"), stream=True, stream_options={"include_usage": True})
    )
    pieces = [c.choices[0].delta.content for c in chunks if c.choices]
    assert pieces[0] == "" and len(pieces) > 5
    assert "".join(p or "" for p in pieces) == "一二三四五六七八九十" * 4
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0

    chunks = list(ask(client, user("q"), stream=True, tools=TOOLS))
    calls = [
        call
        for c in chunks
        if c.choices
        for call in c.choices[0].delta.tool_calls or ()
    ]
    assert calls[0].function.name == "search_notes" and calls[0].id
    arguments = "".join(call.function.arguments or "" for call in calls)
    assert json.loads(arguments) == {"keyword": "Redis 缓存方案"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert all(c.usage is None for c in chunks)  # not asked for


def test_a_broken_stream_drops_the_connection_mid_reply(
    serve: Callable[..., Any],
) -> None:
    from tests.support.replies import broken_stream

    _, client = serve(Script([broken_stream(text("a long answer " * 5), 3)]))
    seen: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        for chunk in ask(client, user("q"), stream=True):
            seen.append(chunk.choices[0].delta.content or "")
    assert "".join(seen) == "a long answer a long answer a lo"[:32]


def test_missing_bearer_token_is_401(serve: Callable[..., Any]) -> None:
    model, _ = serve()
    body = json.dumps({"model": "m", "messages": user("q")}).encode()
    request = urllib.request.Request(
        f"{model.base_url}/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as denied:
        urllib.request.urlopen(request, timeout=5)
    assert denied.value.code == 401
    assert denied.value.headers["x-request-id"].startswith("req_")
    payload = json.loads(denied.value.read())
    assert payload["error"]["code"] == "invalid_api_key"


# RedisScript ------------------------------------------------------------------


def run_dialogue(
    client: openai.OpenAI,
    messages: list[dict[str, Any]],
    tools: Mapping[str, Callable[[dict[str, Any]], Any]],
    max_rounds: int = 6,
) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """Play the agent loop: run the tools the model asks for until it answers."""
    calls: list[tuple[str, dict[str, Any]]] = []
    for _ in range(max_rounds):
        message = ask(client, messages, tools=TOOLS, tool_choice="auto").choices[0]
        message = message.message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or "", calls
        for call in message.tool_calls:
            arguments = json.loads(call.function.arguments)
            calls.append((call.function.name, arguments))
            result = tools[call.function.name](arguments)
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": json.dumps(result, ensure_ascii=False),
                }
            )
    raise AssertionError("the model never answered")


def fake_search(arguments: dict[str, Any]) -> Any:
    return NOTES if arguments["keyword"] == "Redis" else []


def fake_calculate(arguments: dict[str, Any]) -> Any:
    results = {"128 * 6 + 320": 1088, "1088 + 12": 1100}
    return {
        "expression": arguments["expression"],
        "result": results[arguments["expression"]],
    }


FAKE_TOOLS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "search_notes": fake_search,
    "calculate": fake_calculate,
}


def test_redis_script_full_dialogue_and_follow_up(serve: Callable[..., Any]) -> None:
    script = RedisScript()
    _, client = serve(script)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful agent."},
        *user(QUESTION),
    ]

    answer, calls = run_dialogue(client, messages, FAKE_TOOLS)

    assert calls == [
        ("search_notes", {"keyword": "Redis"}),
        ("calculate", {"expression": "128 * 6 + 320"}),
    ]
    assert (
        answer
        == "提到 Redis 的方案是「缓存改造」，预算表达式 128 * 6 + 320 的总和是 1088。"
    )
    assert [m["role"] for m in script.requests[-1]["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]

    messages.append({"role": "user", "content": "刚才的总和再加 12 是多少？"})
    follow_up, more_calls = run_dialogue(client, messages, FAKE_TOOLS)

    assert more_calls == [("calculate", {"expression": "1088 + 12"})]
    assert "1100" in follow_up


def test_redis_script_many_concurrent_conversations(
    serve: Callable[..., Any],
) -> None:
    _, client = serve(RedisScript(), latency_s=0.05)

    def one(_: int) -> str:
        return run_dialogue(client, user(QUESTION), FAKE_TOOLS)[0]

    with ThreadPoolExecutor(max_workers=10) as pool:
        answers = list(pool.map(one, range(10)))
    assert all("缓存改造" in a and "1088" in a for a in answers)


def test_redis_script_greets_and_reports_tool_errors(
    serve: Callable[..., Any],
) -> None:
    _, client = serve(RedisScript())

    greeting = ask(client, user("你好"), tools=TOOLS).choices[0].message
    assert greeting.content == "你好！我可以搜索项目笔记并计算预算。"

    def failing_search(arguments: dict[str, Any]) -> Any:
        return {"error": "数据库不可用"}

    answer, _ = run_dialogue(
        client, user(QUESTION), {**FAKE_TOOLS, "search_notes": failing_search}
    )
    assert "失败" in answer and "数据库不可用" in answer

    nothing, _ = run_dialogue(
        client, user(QUESTION), {**FAKE_TOOLS, "search_notes": lambda a: []}
    )
    assert "没有找到" in nothing


def test_redis_script_unwraps_engine_envelopes(serve: Callable[..., Any]) -> None:
    _, client = serve(RedisScript())

    def noted_search(arguments: dict[str, Any]) -> Any:
        return {"result": NOTES, "note": "cached"}

    answer, _ = run_dialogue(
        client, user(QUESTION), {**FAKE_TOOLS, "search_notes": noted_search}
    )
    assert "缓存改造" in answer and "1088" in answer


def test_redis_script_only_calls_offered_tools(serve: Callable[..., Any]) -> None:
    _, client = serve(RedisScript())
    reply = ask(client, user(QUESTION)).choices[0]
    assert reply.finish_reason == "stop"
    assert "search_notes" in (reply.message.content or "")


# Process mode -----------------------------------------------------------------


def test_process_mode_serves_until_sigterm() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.scripted_model", "--port", "0"]
        + ["--script", "redis"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines: list[str] = []
        reader = threading.Thread(
            target=lambda: lines.append(process.stdout.readline()),  # type: ignore[union-attr]
            daemon=True,
        )
        reader.start()
        reader.join(timeout=20)
        assert lines and lines[0].startswith("READY "), process.stderr
        base_url = lines[0].split()[1]
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1")

        client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)
        completion = ask(client, user(QUESTION), tools=TOOLS)
        call = completion.choices[0].message.tool_calls[0]
        assert call.function.name == "search_notes"
        assert completion._request_id.startswith("req_")

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
