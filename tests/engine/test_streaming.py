"""The model call streams: the assembled reply is the non-streaming one, its
pieces reach the watcher, a broken stream is retried, a cut closes it at once.

Real HTTP on loopback (the scripted model), the real ``openai`` SDK.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

import openai
import pytest

from engine.execution import Executor
from engine.loop import Engine
from engine.memory_journal import MemoryJournal
from engine.model_client import (
    ModelError,
    OpenAIModelClient,
    ReplyDelta,
    ReplyStream,
    assistant_message,
    parse_message,
    reply_stream,
)
from engine.spec import (
    DetailKey,
    ErrorClass,
    Limits,
    StepKind,
    StepStatus,
    StopReason,
    Toolbox,
    Usage,
)
from tests.support.openai_tools import function_tool, object_schema
from tests.support.replies import (
    Reply,
    Script,
    broken_stream,
    slow_stream,
    text,
    tool_calls,
    with_usage,
)
from tests.support.scripted_model import ScriptedModel

HELLO = [{"role": "user", "content": "hi"}]
TOOLS = [
    function_tool(name, object_schema({"q": {"type": "string"}}, ["q"]), name)
    for name in ("search_notes", "send_email")
]


class Heard:
    """A ReplyWatcher that keeps what it hears."""

    def __init__(self) -> None:
        self.deltas: list[ReplyDelta] = []
        self.ends = 0
        self.first = threading.Event()

    def delta(self, delta: ReplyDelta) -> None:
        self.deltas.append(delta)
        if delta.text:
            self.first.set()

    def ended(self) -> None:
        self.ends += 1

    @property
    def text(self) -> str:
        out = ""
        for delta in self.deltas:
            out = ("" if delta.reset else out) + delta.text
        return out


@pytest.fixture(autouse=True)
def _unwatched() -> Iterator[None]:
    """Each test sets its own stream; none outlives it."""
    token = reply_stream.set(None)
    yield
    reply_stream.reset(token)


@pytest.fixture
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel(stream_chunk_chars=5) as server:
        yield server


def client_of(server: ScriptedModel, **options: Any) -> OpenAIModelClient:
    return OpenAIModelClient(
        base_url=server.base_url, api_key="k", sleep=lambda _: None, **options
    )


def watched(heard: Heard | None = None) -> ReplyStream:
    stream = ReplyStream(heard)
    reply_stream.set(stream)
    return stream


def unstreamed(server: ScriptedModel, reply: Reply) -> dict[str, Any]:
    """What the non-streaming call returned for ``reply``, put together the way
    the client did before it streamed (message, content, calls, usage)."""
    server.handler = Script([reply])
    sdk = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
    completion = sdk.chat.completions.create(
        model="m", messages=HELLO, tools=TOOLS, temperature=0.0
    )
    choice = completion.choices[0]
    content, calls = parse_message(choice.message.model_dump(exclude_none=True))
    return {
        "message": assistant_message(content, calls),
        "content": content,
        "tool_calls": [asdict(c) for c in calls],
        "finish_reason": choice.finish_reason,
        "usage": Usage.from_dict(completion.usage.model_dump()).as_dict(),
        "model": completion.model,
    }


REPLIES = {
    "text": text("Redis 的方案是「缓存改造」，总预算 1088 元。" * 3),
    "empty": text(""),
    "calls": tool_calls(
        [
            ("search_notes", {"q": "Redis 缓存"}, "call_a"),
            ("send_email", {"q": "x" * 40}, "call_b"),
        ]
    ),
    "text and a call": Reply(
        content="Let me look.",
        tool_calls=tool_calls([("search_notes", '{"q": "a"}', "call_c")]).tool_calls,
    ),
    "cached tokens": with_usage(
        text("ok"),
        {
            "prompt_tokens": 12,
            "completion_tokens": 3,
            "total_tokens": 15,
            "prompt_tokens_details": {"cached_tokens": 8},
        },
    ),
}


@pytest.mark.parametrize("name", list(REPLIES))
def test_the_streamed_reply_is_exactly_the_non_streaming_one(
    model: ScriptedModel, name: str
) -> None:
    reply = REPLIES[name]
    expected = unstreamed(model, reply)
    model.handler = Script([reply])
    got = client_of(model).complete(messages=HELLO, tools=TOOLS, model="m")
    assert {
        "message": got.message,
        "content": got.content,
        "tool_calls": [asdict(c) for c in got.tool_calls],
        "finish_reason": got.finish_reason,
        "usage": got.usage.as_dict(),
        "model": got.model,
    } == expected
    assert got.usage_reported and got.request_id.startswith("req_")
    body = model.requests[-1]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


def test_pieces_reach_the_watcher_and_a_tool_call_shows_its_name_only(
    model: ScriptedModel,
) -> None:
    reply = Reply(
        content="Sending it now.",
        tool_calls=tool_calls([("send_email", {"q": "secret body"})]).tool_calls,
    )
    model.handler = Script([reply])
    heard = Heard()
    watched(heard)
    got = client_of(model).complete(messages=HELLO, tools=TOOLS, model="m")
    assert len([d for d in heard.deltas if d.text]) == 3  # 5 characters a chunk
    assert heard.text == got.content == "Sending it now."
    assert heard.deltas[-1].tools == ("send_email",)
    assert not any("secret" in d.text for d in heard.deltas)
    assert heard.ends == 1


def test_a_stream_that_breaks_mid_reply_is_retried_and_the_watcher_starts_over(
    model: ScriptedModel,
) -> None:
    model.handler = Script(
        [broken_stream(text("the first try, cut short"), 3), text("second try")]
    )
    heard = Heard()
    watched(heard)
    got = client_of(model).complete(messages=HELLO, tools=[], model="m")
    assert got.content == "second try"
    assert [a.error_class for a in got.attempts] == [ErrorClass.CONNECTION, None]
    assert "broke off" in (got.attempts[0].error or "") or "unreachable" in (
        got.attempts[0].error or ""
    )
    resets = [d for d in heard.deltas if d.reset]
    assert len(resets) == 1 and resets[0].attempt == 2
    assert heard.text == "second try"


def test_a_stream_that_keeps_breaking_fails_like_any_call(
    model: ScriptedModel,
) -> None:
    model.handler = Script([broken_stream(text("never whole"), 2)] * 3)
    with pytest.raises(ModelError) as caught:
        client_of(model, max_retries=2).complete(messages=HELLO, tools=[], model="m")
    assert caught.value.kind == ErrorClass.CONNECTION
    assert len(caught.value.attempts) == 3


def test_a_cut_closes_the_stream_at_once_and_keeps_the_text_so_far(
    model: ScriptedModel,
) -> None:
    model.handler = Script([slow_stream(text("word " * 200), 0.05)])
    heard = Heard()
    stream = watched(heard)
    client = client_of(model)
    with ThreadPoolExecutor(1) as pool:
        call = pool.submit(
            contextvars.copy_context().run,
            client.complete,
            messages=HELLO,
            tools=[],
            model="m",
        )
        assert heard.first.wait(10)
        partial = stream.cut()
        with pytest.raises(ModelError) as caught:
            call.result(timeout=10)
    assert caught.value.kind == ErrorClass.CANCELLED
    assert partial is not None and partial.content
    assert ("word " * 200).startswith(partial.content)
    assert len(partial.content) < len("word " * 200)
    assert heard.ends == 1


def _engine(server: ScriptedModel, heard: Heard) -> Engine:
    return Engine(
        model_client=client_of(server),
        toolbox=Toolbox(specs={}, handlers={}),
        executor=Executor(max_threads=2),
        limits=Limits(),
        model_pool=ThreadPoolExecutor(2),
        poll_interval_s=0.02,
        reply_watcher=heard,
    )


def test_a_cancel_mid_reply_records_what_was_written_marked_as_cut(
    model: ScriptedModel,
) -> None:
    model.handler = Script([slow_stream(text("word " * 400), 0.05)])
    heard = Heard()
    journal = MemoryJournal(task_id="t", goal="talk")
    engine = _engine(model, heard)
    runner = threading.Thread(target=engine.advance, args=(journal,))
    runner.start()
    assert heard.first.wait(10)
    journal.cancelled = True
    runner.join(10)
    assert not runner.is_alive()
    assert journal.finished is not None and journal.finished[0] is StopReason.CANCELLED
    [step] = [s for s in journal.steps if s.kind is StepKind.MODEL_CALL]
    assert step.status is StepStatus.FAILED
    assert step.error_class == ErrorClass.CANCELLED
    assert step.detail[DetailKey.CUT] is True
    written = step.response["content"]
    assert written and ("word " * 400).startswith(written)
    assert written.startswith(heard.text[: len(written)])
    assert heard.ends == 1


def test_a_run_streams_its_answer_to_the_watcher_and_records_it_whole(
    model: ScriptedModel,
) -> None:
    model.handler = Script([text("The whole answer, in pieces.")])
    heard = Heard()
    journal = MemoryJournal(task_id="t", goal="talk")
    _engine(model, heard).advance(journal)
    assert journal.finished is not None
    assert journal.finished[1] == "The whole answer, in pieces."
    [step] = journal.steps
    assert step.response == {
        "role": "assistant",
        "content": "The whole answer, in pieces.",
    }
    assert heard.text == "The whole answer, in pieces." and heard.ends == 1


def test_a_streamed_call_leaves_its_connection_for_the_next_one(
    model: ScriptedModel,
) -> None:
    model.handler = Script([text("one " * 20), text("two " * 20), text("three")])
    client = client_of(model)
    for _ in range(3):
        client.complete(messages=HELLO, tools=[], model="m")
    assert model.connections_opened == 1


def test_a_run_cut_mid_reply_re_runs_to_the_same_cut(model: ScriptedModel) -> None:
    from engine.replay import RecordedRun, rerun

    model.handler = Script([slow_stream(text("word " * 400), 0.05)])
    heard = Heard()
    journal = MemoryJournal(task_id="t", goal="talk")
    runner = threading.Thread(target=_engine(model, heard).advance, args=(journal,))
    runner.start()
    assert heard.first.wait(10)
    journal.cancelled = True
    runner.join(10)
    assert journal.finished is not None
    recorded = RecordedRun(
        task_id="t",
        goal="talk",
        system=journal.system,
        model=journal.model,
        steps=list(journal.steps),
        stop_reason=journal.finished[0].value,
    )
    result = rerun(recorded, specs={}, limits=Limits())
    assert result.matches, result.divergence
    assert result.stop_reason == "cancelled"
    [step] = result.steps
    assert step.detail[DetailKey.CUT] is True
    assert step.response == journal.steps[0].response
