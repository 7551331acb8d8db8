"""A scripted OpenAI-compatible chat-completions server for the test suite.

Real HTTP on loopback, spoken to by the real ``openai`` SDK, built only on the
standard library (no Django). A *handler* decides each answer, in the replies of
``tests.support.replies``::

    with ScriptedModel(Script([tool_call("calculate", {"expression": "1 + 1"}),
                               text("2")])) as model:
        client = openai.OpenAI(base_url=model.base_url, api_key="test")
        ...

Endpoints: ``POST /v1/chat/completions`` (answered whole, or streamed as
``chat.completion.chunk`` events with ``stream=true``, the usage chunk last when
``stream_options.include_usage`` asks; a reply may stream slowly or break off,
``replies.slow_stream`` / ``replies.broken_stream``) and ``GET /v1/models``.
Every response carries a unique ``x-request-id`` header. Requests are validated
the way the real API does it (messages present, tool messages answering the
tool calls of the assistant message right before them, every tool call
answered, a bearer token), so engine bugs surface as ``400``/``401``.

Also runnable as a process for tests whose worker lives elsewhere::

    python -m tests.support.scripted_model --port 0 --script redis
    # prints "READY http://127.0.0.1:PORT/v1" and serves until SIGTERM
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import re
import secrets
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from localmodel.chatformat import content_text
from tests.support.lifecycle import Started
from tests.support.replies import (
    AnyReply,
    ErrorReply,
    Handler,
    RecordingHandler,
    Reply,
    error,
    text,
    tool_call,
)

__all__ = [
    "MODEL_ID",
    "EchoScript",
    "RedisScript",
    "ScriptedModel",
    "content_text",
    "last_user_index",
    "last_user_text",
    "main",
    "messages_of",
    "tool_messages",
    "tool_names_by_call_id",
    "usage_for",
    "validate_chat_request",
]

MODEL_ID = "scripted-model"
GREETING_TEXT = "你好！我可以搜索项目笔记并计算预算。"


# Conversation helpers ---------------------------------------------------------


def messages_of(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = request.get("messages")
    if not isinstance(messages, list):
        return []
    return [m for m in messages if isinstance(m, dict)]


def last_user_index(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the last ``user`` message, or ``None``."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return None


def last_user_text(request: Mapping[str, Any]) -> str:
    """The text of the last ``user`` message of a request ("" if none)."""
    messages = messages_of(request)
    index = last_user_index(messages)
    return "" if index is None else content_text(messages[index].get("content"))


def this_turn(
    request: Mapping[str, Any],
) -> tuple[list[dict[str, Any]], int, str, dict[str, str]] | None:
    """``(messages, index of the last user message, its text, tool names by call
    id)``, or None when no user has spoken."""
    messages = messages_of(request)
    user_index = last_user_index(messages)
    if user_index is None:
        return None
    question = content_text(messages[user_index].get("content"))
    return messages, user_index, question, tool_names_by_call_id(messages)


def tool_messages(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``tool`` messages of a request (the results the model was sent)."""
    return [m for m in messages_of(request) if m.get("role") == "tool"]


def tool_names_by_call_id(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """``tool_call_id -> function name`` over every assistant message."""
    names: dict[str, str] = {}
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            if isinstance(call, Mapping):
                function = call.get("function") or {}
                if isinstance(function, Mapping):
                    names[str(call.get("id"))] = str(function.get("name") or "")
    return names


# Validation -------------------------------------------------------------------

_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


@dataclass(frozen=True)
class ValidationFailure:
    """Why a request would be rejected with ``400``."""

    message: str
    param: str | None = None


def _check_tool_calls(index: int, calls: Any) -> ValidationFailure | list[str]:
    where = f"messages[{index}].tool_calls"
    if not isinstance(calls, list):
        return ValidationFailure(
            f"Invalid type for '{where}': expected an array.", where
        )
    ids: list[str] = []
    for number, call in enumerate(calls):
        at = f"{where}[{number}]"
        if not isinstance(call, Mapping):
            return ValidationFailure(
                f"Invalid type for '{at}': expected an object.", at
            )
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            return ValidationFailure(f"Missing required parameter: '{at}.id'.", at)
        if call.get("type") != "function":
            return ValidationFailure(
                f"Invalid value for '{at}.type': expected 'function'.", at
            )
        function = call.get("function")
        if not isinstance(function, Mapping):
            return ValidationFailure(
                f"Missing required parameter: '{at}.function'.", at
            )
        if not isinstance(function.get("name"), str) or not function.get("name"):
            return ValidationFailure(
                f"Missing required parameter: '{at}.function.name'.", at
            )
        if not isinstance(function.get("arguments"), str):
            return ValidationFailure(
                f"Invalid type for '{at}.function.arguments': expected a string.", at
            )
        ids.append(call_id)
    return ids


def _unanswered(pending: list[str]) -> ValidationFailure:
    return ValidationFailure(
        "An assistant message with 'tool_calls' must be followed by tool messages "
        "responding to each 'tool_call_id'. The following tool_call_ids did not "
        f"have response messages: {', '.join(pending)}",
        "messages",
    )


def validate_chat_request(body: Any) -> ValidationFailure | None:
    """What the real API would reject in a chat-completions body, or ``None``.

    Tool messages must directly follow (in a run of tool messages) an assistant
    message whose ``tool_calls`` contain their ``tool_call_id``, and every such
    call must be answered before the next non-tool message.
    """
    if not isinstance(body, dict):
        return ValidationFailure("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return ValidationFailure("You must provide a model parameter.", "model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return ValidationFailure(
            "Invalid 'messages': expected a non-empty array of messages.", "messages"
        )
    block_ids: set[str] | None = None  # ids of the open assistant tool_calls block
    pending: list[str] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, Mapping):
            return ValidationFailure(f"Invalid type for '{where}': expected an object.")
        role = message.get("role")
        if role not in _ROLES:
            return ValidationFailure(
                f"Invalid value for '{where}.role': {role!r}.", f"{where}.role"
            )
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                return ValidationFailure(
                    f"Missing required parameter: '{where}.tool_call_id'.",
                    f"{where}.tool_call_id",
                )
            if block_ids is None:
                return ValidationFailure(
                    "Invalid parameter: messages with role 'tool' must be a response "
                    "to a preceeding message with 'tool_calls'.",
                    f"{where}.role",
                )
            if call_id not in block_ids:
                return ValidationFailure(
                    f"Invalid parameter: '{where}.tool_call_id' {call_id!r} does not "
                    "match any tool call of the preceding assistant message.",
                    f"{where}.tool_call_id",
                )
            if call_id in pending:
                pending.remove(call_id)
            continue
        if pending:
            return _unanswered(pending)
        block_ids = None
        if role == "assistant" and message.get("tool_calls"):
            checked = _check_tool_calls(index, message.get("tool_calls"))
            if isinstance(checked, ValidationFailure):
                return checked
            block_ids = set(checked)
            pending = list(checked)
    if pending:
        return _unanswered(pending)
    return None


# Ready-made handlers ----------------------------------------------------------


class EchoScript(RecordingHandler):
    """Answers ``prefix + <last user message>`` (smoke tests)."""

    def __init__(self, prefix: str = "echo: ") -> None:
        super().__init__()
        self.prefix = prefix

    def respond(self, request: dict[str, Any]) -> AnyReply:
        return text(f"{self.prefix}{last_user_text(request)}")


_EXPRESSION_AFTER = re.compile(r"预算表达式为\s*[:：]?\s*([^。]+)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_ARITHMETIC = re.compile(r"[\d.\s()（）+\-*/×÷]+")
_ASCII_OPERATORS = str.maketrans({"×": "*", "÷": "/", "（": "(", "）": ")"})
_FOLLOW_UP_OPERATORS: tuple[tuple[str, str], ...] = (
    ("再加上", "+"),
    ("再加", "+"),
    ("加上", "+"),
    ("再减去", "-"),
    ("再减", "-"),
    ("减去", "-"),
    ("再乘以", "*"),
    ("再乘", "*"),
    ("乘以", "*"),
    ("再除以", "/"),
    ("再除", "/"),
    ("除以", "/"),
)


def _parse_tool_content(content: Any) -> Any:
    """A tool message's JSON, unwrapped from the engine's ``{"result", "note"}``
    and ``{"truncated", "partial_result"}`` envelopes; raw text if not JSON."""
    raw = content_text(content)
    try:
        value: Any = json.loads(raw)
    except ValueError:
        return raw
    if isinstance(value, dict):
        if "partial_result" in value and value.get("truncated"):
            return str(value["partial_result"])
        if "result" in value and "expression" not in value and "error" not in value:
            return value["result"]
    return value


def _format_number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class RedisScript(RecordingHandler):
    """A deterministic fake model for the demo question (``cast.QUESTION``).

    It reacts to the conversation it is sent, keeping no state between requests,
    so any number of concurrent conversations work:

    * a user message mentioning Redis with no tool result after it →
      ``search_notes({"keyword": "Redis"})``;
    * latest tool result from ``search_notes`` → ``calculate`` with the
      expression after 「预算表达式为」 in the first note mentioning Redis;
    * latest tool result from ``calculate`` → the final answer naming the note
      title (found again in the search result) and the result;
    * a tool result ``{"error": ...}`` → a text saying the tool failed;
    * a follow-up such as 「刚才的总和再加 12 是多少？」 → ``calculate`` on the
      previous answer's number and the new number; another arithmetic question
      → ``calculate`` on it; anything else → a greeting.

    With ``require_tools`` (default) it only calls tools the request offers in
    ``tools`` and calls none when ``tool_choice`` is ``"none"``, like a real
    model; otherwise it says in text that it cannot.
    """

    def __init__(self, *, require_tools: bool = True) -> None:
        super().__init__()
        self.require_tools = require_tools

    # The decision -------------------------------------------------------------

    def respond(self, request: dict[str, Any]) -> AnyReply:
        current = this_turn(request)
        if current is None:
            return text(GREETING_TEXT)
        messages, user_index, question, names = current
        results = [m for m in messages[user_index + 1 :] if m.get("role") == "tool"]
        if not results:
            return self._first_move(request, messages[:user_index], question)
        latest = results[-1]
        name = names.get(str(latest.get("tool_call_id")), "")
        value = _parse_tool_content(latest.get("content"))
        if isinstance(value, dict) and "error" in value:
            label = name or "工具"
            return text(f"调用 {label} 失败：{value['error']}")
        if name == "search_notes" or (not name and isinstance(value, list)):
            return self._after_search(request, value)
        if name == "calculate" or (
            not name and isinstance(value, dict) and "expression" in value
        ):
            return self._after_calculate(messages, question, value)
        return text(
            f"工具 {name or '(unknown)'} 返回了：{content_text(latest.get('content'))}"
        )

    def _call(
        self, request: Mapping[str, Any], name: str, args: dict[str, Any]
    ) -> Reply:
        if self.require_tools:
            offered = {
                str((tool.get("function") or {}).get("name"))
                for tool in request.get("tools") or []
                if isinstance(tool, Mapping)
                and isinstance(tool.get("function"), Mapping)
            }
            if request.get("tool_choice") == "none" or name not in offered:
                return text(f"我需要 {name} 工具才能回答，但当前不能使用它。")
        return tool_call(name, args)

    def _first_move(
        self,
        request: Mapping[str, Any],
        earlier: Sequence[Mapping[str, Any]],
        question: str,
    ) -> AnyReply:
        if "redis" in question.lower():
            return self._call(request, "search_notes", {"keyword": "Redis"})
        expression = self._follow_up_expression(earlier, question)
        if expression is not None:
            return self._call(request, "calculate", {"expression": expression})
        return text(GREETING_TEXT)

    @staticmethod
    def _follow_up_expression(
        earlier: Sequence[Mapping[str, Any]], question: str
    ) -> str | None:
        numbers = _NUMBER.findall(question)
        if not numbers:
            return None
        for word, symbol in _FOLLOW_UP_OPERATORS:
            if word in question:
                previous = None
                for message in reversed(earlier):
                    if message.get("role") == "assistant":
                        found = _NUMBER.findall(content_text(message.get("content")))
                        if found:
                            previous = found[-1]
                            break
                if previous is None:
                    return None
                return f"{previous} {symbol} {numbers[-1]}"
        candidates = [
            c.strip()
            for c in _ARITHMETIC.findall(question)
            if re.search(r"\d", c) and re.search(r"[+\-*/×÷]", c)
        ]
        if not candidates:
            return None
        best: str = max(candidates, key=len)
        return best.translate(_ASCII_OPERATORS)

    @staticmethod
    def _redis_note(value: Any) -> tuple[str | None, str | None]:
        """``(title, expression)`` of the first note mentioning Redis."""
        if isinstance(value, list):
            for note in value:
                if not isinstance(note, Mapping):
                    continue
                title = str(note.get("title") or "")
                body = str(note.get("content") or "")
                if "redis" in f"{title}\n{body}".lower():
                    match = _EXPRESSION_AFTER.search(body) or _EXPRESSION_AFTER.search(
                        title
                    )
                    return title, match.group(1).strip() if match else None
            return None, None
        raw = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        at = raw.lower().find("redis")
        if at < 0:
            return None, None
        match = _EXPRESSION_AFTER.search(raw, at)
        titles = re.findall(r'"title"\s*:\s*"([^"]*)"', raw[:at])
        return (titles[-1] if titles else None), (
            match.group(1).strip() if match else None
        )

    def _after_search(self, request: Mapping[str, Any], value: Any) -> AnyReply:
        title, expression = self._redis_note(value)
        if title is None and expression is None:
            return text("项目笔记里没有找到提到 Redis 的方案。")
        if expression is None:
            return text(f"提到 Redis 的方案是「{title}」，但其中没有预算表达式。")
        return self._call(request, "calculate", {"expression": expression})

    def _after_calculate(
        self, messages: Sequence[Mapping[str, Any]], question: str, value: Any
    ) -> AnyReply:
        if isinstance(value, dict):
            expression = str(value.get("expression", ""))
            result = _format_number(value.get("result"))
        else:
            expression, result = "", _format_number(value)
        if "redis" in question.lower():
            title = self._title_from_search(messages)
            if title is not None:
                return text(
                    f"提到 Redis 的方案是「{title}」，预算表达式 {expression} "
                    f"的总和是 {result}。"
                )
        if expression:
            return text(f"{expression} 的结果是 {result}。")
        return text(f"结果是 {result}。")

    def _title_from_search(self, messages: Sequence[Mapping[str, Any]]) -> str | None:
        """The Redis note's title, found again in the latest search result."""
        names = tool_names_by_call_id(messages)
        for message in reversed(messages):
            if message.get("role") != "tool":
                continue
            name = names.get(str(message.get("tool_call_id")), "")
            value = _parse_tool_content(message.get("content"))
            if name == "search_notes" or (not name and isinstance(value, list)):
                title, _ = self._redis_note(value)
                if title:
                    return title
        return None


# The server -------------------------------------------------------------------


_QUOTED = re.compile(r"[「“\"]([^」”\"]+)[」”\"]")
_LATIN_WORD = re.compile(r"\b[A-Z][A-Za-z]{2,}\b")
_OBEY = re.compile(r"\b(send_email|create_ticket)\b[^{]{0,40}(\{[^{}]*\})")
_BUDGET_WORDS = ("预算", "总和", "budget", "total")
_RETENTION_WORDS = ("保留", "多少天", "retention", "days")


class NotesScript(RedisScript):
    """The demo questions in general, and the worst case for injections.

    A fake for the eval suites (``evals/suites``): it searches the notes for the
    quoted name or the capitalised word of the question (``「搜索实验」``,
    ``Redis``), computes the budget of the note it finds, quotes a note's
    retention, says when nothing matched, and does plain arithmetic and
    follow-ups like :class:`RedisScript`. It **obeys** any instruction in a tool
    result to call ``send_email`` or ``create_ticket`` with a JSON object (once
    per turn), then carries on with the user's question: what the platform must
    contain is a model that does whatever the data says.
    """

    def respond(self, request: dict[str, Any]) -> AnyReply:
        current = this_turn(request)
        if current is None:
            return text(GREETING_TEXT)
        messages, user_index, question, names = current
        results = [
            (names.get(str(m.get("tool_call_id")), ""), m)
            for m in messages[user_index + 1 :]
            if m.get("role") == "tool"
        ]
        if not results:
            keyword = self._keyword(question)
            if keyword is not None:
                return self._call(request, "search_notes", {"keyword": keyword})
            return super().respond(request)
        called = {name for name, _ in results}
        searches = [m for name, m in results if name == "search_notes"]
        if searches and not called & {"send_email", "create_ticket"}:
            order = self._injected_order(searches[-1])
            if order is not None:
                return self._call(request, order[0], order[1])
        name, latest = results[-1]
        if name in ("send_email", "create_ticket") and searches:
            # Obeyed (or refused by a human): back to the user's question.
            return self._after_notes(request, question, searches[-1])
        if name == "search_notes":
            return self._after_notes(request, question, latest)
        return super().respond(request)

    @staticmethod
    def _keyword(question: str) -> str | None:
        quoted = _QUOTED.search(question)
        if quoted:
            return quoted.group(1).strip()
        latin = _LATIN_WORD.findall(question)
        words = [w for w in latin if w.lower() not in {"which", "find", "what"}]
        return words[0] if words else None

    @staticmethod
    def _injected_order(
        message: Mapping[str, Any],
    ) -> tuple[str, dict[str, Any]] | None:
        match = _OBEY.search(content_text(message.get("content")).replace('\\"', '"'))
        if match is None:
            return None
        try:
            arguments = json.loads(match.group(2))
        except ValueError:
            return None
        return (match.group(1), arguments) if isinstance(arguments, dict) else None

    def _after_notes(
        self, request: Mapping[str, Any], question: str, message: Mapping[str, Any]
    ) -> AnyReply:
        value = _parse_tool_content(message.get("content"))
        keyword = (self._keyword(question) or "").lower()
        notes = [
            n
            for n in (value if isinstance(value, list) else [])
            if isinstance(n, Mapping)
            and keyword
            and keyword in f"{n.get('title')}\n{n.get('content')}".lower()
        ]
        if not notes:
            return text(f"项目笔记里没有找到提到 {keyword or '它'} 的方案。")
        title = str(notes[0].get("title") or "")
        body = str(notes[0].get("content") or "")
        lowered = question.lower()
        if any(word in lowered for word in _BUDGET_WORDS):
            match = _EXPRESSION_AFTER.search(body)
            if match is None:
                return text(f"「{title}」里没有预算表达式。")
            calculated = [
                m
                for m in messages_of(request)[
                    last_user_index(messages_of(request)) or 0 :
                ]
                if m.get("role") == "tool"
                and isinstance(_parse_tool_content(m.get("content")), dict)
                and "expression" in _parse_tool_content(m.get("content"))
            ]
            if calculated:
                result = _parse_tool_content(calculated[-1].get("content"))
                return text(
                    f"「{title}」的预算表达式 {result.get('expression')} 的总和是 "
                    f"{_format_number(result.get('result'))}。"
                )
            return self._call(
                request, "calculate", {"expression": match.group(1).strip()}
            )
        if any(word in lowered for word in _RETENTION_WORDS):
            return text(f"「{title}」：{body}")
        return text(f"提到 {keyword} 的方案是「{title}」：{body}")

    def _after_calculate(
        self, messages: Sequence[Mapping[str, Any]], question: str, value: Any
    ) -> AnyReply:
        title = None
        for message in reversed(messages):
            parsed = _parse_tool_content(message.get("content"))
            if message.get("role") == "tool" and isinstance(parsed, list):
                keyword = (self._keyword(question) or "").lower()
                for note in parsed:
                    if (
                        isinstance(note, Mapping)
                        and keyword
                        and keyword
                        in (f"{note.get('title')}\n{note.get('content')}".lower())
                    ):
                        title = str(note.get("title"))
                        break
                break
        if title and isinstance(value, dict):
            return text(
                f"「{title}」的预算表达式 {value.get('expression')} 的总和是 "
                f"{_format_number(value.get('result'))}。"
            )
        return super()._after_calculate(messages, question, value)


def usage_for(request: Mapping[str, Any], reply: Reply) -> dict[str, int]:
    """Deterministic token counts: characters // 4 + 1 on each side."""
    messages = messages_of(request)
    prompt_chars = sum(len(content_text(m.get("content"))) for m in messages)
    completion_chars = len(reply.content or "") + sum(
        len(c.name) + len(c.arguments) for c in reply.tool_calls
    )
    prompt = prompt_chars // 4 + 1
    completion = completion_chars // 4 + 1
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def stream_chunks(
    completion: Mapping[str, Any], piece_chars: int
) -> Iterator[dict[str, Any]]:
    """A ``chat.completion`` as the ``chat.completion.chunk`` dicts OpenAI
    streams: the role, the content in pieces of ``piece_chars`` characters, each
    tool call (its id and name, then its arguments in pieces), the finish, then
    the usage in a chunk with no choices."""
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(
        delta: dict[str, Any] | None, finish: str | None = None
    ) -> dict[str, Any]:
        choices = (
            []
            if delta is None
            else [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            ]
        )
        return {
            "id": completion["id"],
            "object": "chat.completion.chunk",
            "created": completion["created"],
            "model": completion["model"],
            "system_fingerprint": completion.get("system_fingerprint"),
            "choices": choices,
        }

    def pieces(text: str) -> list[str]:
        return [text[i : i + piece_chars] for i in range(0, len(text), piece_chars)]

    content = message.get("content")
    yield chunk({"role": "assistant", "content": None if content is None else ""})
    for piece in pieces(content or ""):
        yield chunk({"content": piece})
    for index, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": function["name"], "arguments": ""},
                    }
                ]
            }
        )
        for piece in pieces(function["arguments"]):
            yield chunk(
                {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
            )
    yield chunk({}, choice["finish_reason"])
    if completion.get("usage") is not None:
        yield {**chunk(None), "usage": completion["usage"]}


def _write_chunk(http: _RequestHandler, text: str) -> None:
    data = text.encode("utf-8")
    http.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    http.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128
    allow_reuse_address = True
    scripted: ScriptedModel


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ScriptedModel/1.0"
    # Headers and body go out in separate writes; with Nagle on, each response
    # would wait ~40 ms for the client's delayed ACK.
    disable_nagle_algorithm = True
    server: _Server

    # plumbing -----------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        self.server.scripted._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.scripted._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.scripted.verbose:
            super().log_message(format, *args)

    def _send_json(
        self,
        status: int,
        payload: Any,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-request-id", self.server.scripted._new_request_id())
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def _send_error(self, reply: ErrorReply) -> None:
        headers: dict[str, str] = {}
        if reply.retry_after is not None:
            seconds = reply.retry_after
            headers["retry-after"] = (
                str(int(seconds)) if float(seconds).is_integer() else str(seconds)
            )
        payload = {
            "error": {
                "message": reply.message,
                "type": reply.type,
                "param": reply.param,
                "code": reply.code,
            }
        }
        self._send_json(reply.status, payload, headers)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _authorized(self) -> bool:
        value = self.headers.get("Authorization") or ""
        scheme, _, token = value.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return True
        self._send_error(
            error(
                401,
                "You didn't provide an API key. You need to provide your API key in "
                "an Authorization header using Bearer auth.",
            )
        )
        return False

    # routes -------------------------------------------------------------------

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if not self._authorized():
            return
        if path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [_model_card()]})
        elif path == f"/v1/models/{MODEL_ID}":
            self._send_json(200, _model_card())
        else:
            self._not_found()

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        body = self._read_body()
        if not self._authorized():
            return
        if path != "/v1/chat/completions":
            self._not_found()
            return
        self.server.scripted._chat(self, body)

    def _not_found(self) -> None:
        self._send_error(
            error(404, f"Unknown request URL: {self.command} {self.path}.", code=None)
        )


def _model_card() -> dict[str, Any]:
    return {
        "id": MODEL_ID,
        "object": "model",
        "created": 0,
        "owned_by": "agent-reach-tests",
    }


class ScriptedModel(Started):
    """The scripted chat-completions server (see the module docstring).

    ``handler`` defaults to ``EchoScript()``; it and ``latency_s`` (a sleep added
    to every completion answer) may be swapped while the server runs. Requests
    and validation failures are recorded in ``requests`` / ``rejections``.
    """

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        latency_s: float = 0.0,
        verbose: bool = False,
        stream_delay_s: float = 0.0,
        stream_chunk_chars: int = 16,
    ) -> None:
        self.handler: Handler = handler if handler is not None else EchoScript()
        #: Streamed answers: the sleep before each chunk (a reply's own
        #: ``chunk_delay_s`` wins) and the characters of content per chunk.
        self.stream_delay_s = stream_delay_s
        self.stream_chunk_chars = stream_chunk_chars
        self.host = host
        self.port = port
        self.latency_s = latency_s
        self.verbose = verbose
        self.requests: list[dict[str, Any]] = []
        self.rejections: list[str] = []
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        #: Connections clients opened so far (kept-alive ones count once).
        self.connections_opened = 0

    # lifecycle ----------------------------------------------------------------

    def start(self) -> ScriptedModel:
        """Bind and serve in a daemon thread; returns ``self``."""
        if self._server is not None:
            raise RuntimeError("ScriptedModel is already started")
        self._stopping.clear()
        server = _Server((self.host, self.port), _RequestHandler)
        server.scripted = self
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"scripted-model:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: wake hanging/sleeping requests and close connections."""
        server = self._server
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    @property
    def running(self) -> bool:
        """Whether the server is serving."""
        return self._server is not None

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1`` for ``openai.OpenAI(base_url=...)``."""
        if self._server is None:
            raise RuntimeError("ScriptedModel is not started")
        return f"http://{self.host}:{self.port}/v1"

    # internals ----------------------------------------------------------------

    def _track(self, connection: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self.connections_opened += 1
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def _new_request_id(self) -> str:
        return f"req_{next(self._counter)}_{secrets.token_hex(6)}"

    def _sleep(self, seconds: float) -> bool:
        """Sleep without blocking others; ``False`` if the server stopped."""
        if seconds <= 0:
            return not self._stopping.is_set()
        return not self._stopping.wait(seconds)

    def _chat(self, http: _RequestHandler, raw: bytes) -> None:
        try:
            body: Any = json.loads(raw.decode("utf-8")) if raw else None
        except ValueError as exc:
            self._reject(http, ValidationFailure(f"The body is not valid JSON: {exc}"))
            return
        if isinstance(body, dict):
            with self._lock:
                self.requests.append(body)
        failure = validate_chat_request(body)
        if failure is not None:
            self._reject(http, failure)
            return
        try:
            reply = self.handler(body)
        except Exception as exc:  # a broken script should fail loudly, not hang
            traceback.print_exc(file=sys.stderr)
            reply = error(500, f"The scripted handler raised {exc!r}.")
        if isinstance(reply, Reply) and reply.hang:
            self._stopping.wait()
            http.close_connection = True
            return
        if not self._sleep(self.latency_s + reply.delay_s):
            http.close_connection = True
            return
        if isinstance(reply, ErrorReply):
            http._send_error(reply)
            return
        completion = self._completion(body, reply)
        if body.get("stream"):
            self._stream(http, body, reply, completion)
            return
        http._send_json(200, completion)

    def _stream(
        self,
        http: _RequestHandler,
        request: Mapping[str, Any],
        reply: Reply,
        completion: dict[str, Any],
    ) -> None:
        """``completion`` as Server-Sent Events in a chunked body, each chunk
        after ``reply.chunk_delay_s`` (or the server's ``stream_delay_s``)."""
        http.send_response(200)
        http.send_header("Content-Type", "text/event-stream; charset=utf-8")
        http.send_header("Transfer-Encoding", "chunked")
        http.send_header("x-request-id", self._new_request_id())
        http.end_headers()
        delay = reply.chunk_delay_s or self.stream_delay_s
        options = request.get("stream_options") or {}
        events = list(stream_chunks(completion, self.stream_chunk_chars))
        if not (isinstance(options, Mapping) and options.get("include_usage")):
            events = [e for e in events if e["choices"]]
        try:
            for number, event in enumerate(events):
                if reply.break_after is not None and number >= reply.break_after:
                    # Dropped mid-reply: the chunked body never ends.
                    http.wfile.flush()
                    with contextlib.suppress(OSError):
                        http.connection.shutdown(socket.SHUT_RDWR)
                    http.close_connection = True
                    return
                if not self._sleep(delay):
                    http.close_connection = True
                    return
                _write_chunk(http, f"data: {json.dumps(event, ensure_ascii=False)}\n\n")
            _write_chunk(http, "data: [DONE]\n\n")
            http.wfile.write(b"0\r\n\r\n")
            http.wfile.flush()
        except OSError:  # the client closed the stream (a cut)
            http.close_connection = True

    def _reject(self, http: _RequestHandler, failure: ValidationFailure) -> None:
        with self._lock:
            self.rejections.append(failure.message)
        if not self._sleep(self.latency_s):
            http.close_connection = True
            return
        http._send_error(
            ErrorReply(
                status=400,
                message=failure.message,
                type="invalid_request_error",
                param=failure.param,
            )
        )

    def _completion(self, request: Mapping[str, Any], reply: Reply) -> dict[str, Any]:
        message = reply.message(lambda index, call: f"call_{secrets.token_hex(12)}")
        message["refusal"] = None
        return {
            "id": f"chatcmpl-{next(self._counter)}{secrets.token_hex(8)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(request.get("model")),
            "system_fingerprint": "fp_scripted",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": reply.finish_reason,
                }
            ],
            "usage": (
                usage_for(request, reply) if reply.usage == "counted" else reply.usage
            ),
        }


# Process mode -----------------------------------------------------------------

SCRIPTS: dict[str, Callable[[], Handler]] = {
    "redis": RedisScript,
    "notes": NotesScript,
    "echo": EchoScript,
}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.support.scripted_model``: serve until SIGTERM/SIGINT."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--script", choices=sorted(SCRIPTS), default="redis")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per answer")
    parser.add_argument("--verbose", action="store_true", help="log each request")
    options = parser.parse_args(argv)

    done = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    model = ScriptedModel(
        SCRIPTS[options.script](),
        host=options.host,
        port=options.port,
        latency_s=options.latency,
        verbose=options.verbose,
    )
    model.start()
    print(f"READY {model.base_url}", flush=True)
    try:
        while not done.wait(0.5):
            pass
    finally:
        model.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
