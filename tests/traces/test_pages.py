"""Trace pages: list filters, the detail timeline and replay frames, stats."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from html import unescape

import pytest
from django.utils import timezone

from engine.spec import StepKind, StepRecord, StepStatus, StopReason
from registry.models import Agent
from runs import services as runs
from runs.models import Task
from tests.support.cast import EMAIL
from tests.support.clients import logged_in
from tests.support.replies import Script, text, tool_call, tool_calls
from tests.support.runs import ask, claimed, decide

pytestmark = pytest.mark.django_db(transaction=True)


def page(user, url: str) -> str:
    response = logged_in(user).get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def listed(html: str) -> list[str]:
    return re.findall(r'<tr data-task="([0-9a-f-]+)"', html)


def replay_data(html: str) -> dict:
    match = re.search(
        r'<script id="replay-data" type="application/json">(.*?)</script>', html, re.S
    )
    assert match, "no replay data"
    return json.loads(match.group(1))


def synthetic_task(user, agent) -> Task:
    """A finished run: parallel calls, a cache hit, retries, a note, a compaction."""
    journal = claimed(user, agent, "synthetic goal")
    task_id = journal.task_id
    t0 = timezone.now()

    def at(ms: int):
        return t0 + timedelta(milliseconds=ms)

    def model_step(seq, request_id, response, tokens, span, **facts):
        prompt, completion = tokens
        return StepRecord(
            seq=seq, kind=StepKind.MODEL_CALL, status=StepStatus.SUCCEEDED,
            model="scripted-model", request_id=request_id, response=response,
            usage={"prompt_tokens": prompt, "completion_tokens": completion,
                   "total_tokens": prompt + completion},
            started_at=at(span[0]), finished_at=at(span[1]), **facts,
        )  # fmt: skip

    def tool_step(seq, status, tool, index, arguments, span, **facts):
        return StepRecord(
            seq=seq, kind=StepKind.TOOL_CALL, status=status, tool=tool,
            parent_seq=1, call_index=index, call_id=f"c{index}", arguments=arguments,
            started_at=at(span[0]), finished_at=at(span[1]), **facts,
        )  # fmt: skip

    def marker(seq, kind, detail, ms):
        return StepRecord(
            seq=seq, kind=kind, status=StepStatus.SUCCEEDED, detail=detail,
            started_at=at(ms), finished_at=at(ms),
        )  # fmt: skip

    attempts = [
        {"number": 1, "started_at": at(100).isoformat(), "duration_ms": 50.0,
         "error": "search_notes did not answer within 5 s.", "error_class": "timeout"},
        {"number": 2, "started_at": at(160).isoformat(), "duration_ms": 40.0,
         "error": None, "error_class": None},
    ]  # fmt: skip
    # fmt: off
    journal.append([
        model_step(1, "req_abc123", {"role": "assistant", "content": None,
                   "tool_calls": []}, tokens=(120, 30), span=(0, 90),
                   detail={"finish_reason": "tool_calls"}),
        tool_step(2, StepStatus.SUCCEEDED, "search_notes", 0, {"keyword": "Redis"},
                  span=(100, 200), raw_arguments='{"keyword": "Redis"}',
                  result=[{"title": "缓存改造", "content": "…"}], attempts=attempts,
                  idempotency_key=f"{task_id}:1:0"),
        tool_step(3, StepStatus.CACHED, "calculate", 1, {"expression": "1 + 1"},
                  span=(110, 150), raw_arguments='{"expression": "1 + 1"}',
                  result={"expression": "1 + 1", "result": 2},
                  idempotency_key=f"{task_id}:1:1"),
        tool_step(4, StepStatus.FAILED, "calculate", 2, {"expression": "1 / 0"},
                  span=(210, 220), error="Division by zero.", error_class="tool_error"),
        marker(5, StepKind.NOTE, {"text": "You already called calculate.",
               "reason": "repeated_call"}, ms=230),
        marker(6, StepKind.COMPACTION, {"replaced": {"2": "{}"},
               "estimate_before": 3000, "estimate_after": 1200, "budget": 3500},
               ms=240),
        model_step(7, "req_def456", {"role": "assistant", "content": "2"},
                   tokens=(200, 5), span=(250, 400)),
    ])
    # fmt: on
    journal.finish(StopReason.FINAL_ANSWER, answer="2", message=None)
    return Task.objects.get(pk=task_id)


def test_the_detail_shows_every_kind_of_step_with_its_facts(alice, demo):
    task = synthetic_task(alice, demo.agent)

    html = page(alice, f"/traces/{task.pk}/")
    text_only = unescape(re.sub(r"<[^>]+>", " ", html))

    # Model calls: model, request id, latency, tokens.
    assert "req_abc123" in html and "req_def456" in html
    assert "120 prompt + 30 completion = 150" in text_only
    assert re.search(r"latency\s*</dt>\s*<dd>90 ms", html)
    # Tool calls: arguments, result, error, attempts, cache hit, duration.
    assert "缓存改造" in html and "Division by zero." in html
    facts2 = re.search(r'data-testid="facts-2">(.*?)</dl>', html, re.S).group(1)
    assert "<dd>2</dd>" in facts2 and "attempt 1" in facts2 and "timeout" in facts2
    assert re.search(r"duration</dt><dd>100 ms", facts2)
    facts3 = re.search(r'data-testid="facts-3">(.*?)</dl>', html, re.S).group(1)
    assert "cache hit</dt><dd>yes" in facts3
    # Notes and compactions.
    assert "You already called calculate." in html
    assert "Shortened 1 earlier result" in html
    # Expandable JSON of every step.
    assert html.count("<summary>JSON</summary>") == 7
    # The link to the conversation.
    assert f'href="/c/{task.conversation_id}/"' in html


def test_parallel_calls_sit_side_by_side_on_the_timing_bar(alice, demo):
    task = synthetic_task(alice, demo.agent)

    html = page(alice, f"/traces/{task.pk}/")

    bars = {
        int(m.group(4)): (float(m.group(1)), float(m.group(2)), int(m.group(3)))
        for m in re.finditer(
            r'data-left="([\d.]+)" data-width="([\d.]+)" data-lane="(\d+)" '
            r'data-seq="(\d+)"',
            html,
        )
    }
    # Steps 2 and 3 ran at the same time: same span of the axis, two lanes.
    assert bars[2][2] != bars[3][2]
    assert bars[3][0] < bars[2][0] + bars[2][1]
    # Step 4 started after both ended: back in the first lane.
    assert bars[4][2] == 0
    assert bars[1][0] == 0.0 and bars[7][0] + bars[7][1] == pytest.approx(100, abs=0.5)
    assert 'style="' not in html  # the CSP forbids inline styles: JS positions them


def test_the_replay_frames_follow_the_recorded_timings(alice, demo):
    task = synthetic_task(alice, demo.agent)

    data = replay_data(page(alice, f"/traces/{task.pk}/"))

    frames = data["frames"]
    times = [f["t"] for f in frames]
    assert times == sorted(times)
    first_seen = {}
    for frame in frames:
        first_seen.setdefault(frame["seq"], frame)
    # A call appears running when its model turn was planned, then finishes.
    assert 'data-status="running"' in first_seen[2]["html"]
    final_2 = [f for f in frames if f["seq"] == 2][-1]
    assert 'data-status="succeeded"' in final_2["html"]
    assert final_2["t"] - first_seen[2]["t"] == pytest.approx(110, abs=2)
    assert frames[-1]["kind"] == "reply" and "bubble assistant" in frames[-1]["html"]
    assert data["duration_ms"] == frames[-1]["t"]
    # The frames are the shared step partial the chat renders.
    assert f'id="step-{task.pk}-7"' in first_seen[7]["html"]


def test_an_approval_shows_who_when_why_and_the_edit(emails_decided, operator):
    html = page(operator, f"/traces/{emails_decided.pk}/")

    box = re.search(r'data-testid="approval-2">(.*?)</div>', html, re.S).group(1)
    assert "decided by <strong>operator</strong>" in box
    assert "approved by operator" in box
    assert (
        "<del>&quot;report&quot;</del>" in box
        and "<ins>&quot;Weekly&quot;</ins>" in box
    )
    rejected = re.search(r'data-testid="approval-4">(.*?)</div>', html, re.S).group(1)
    assert "not the boss" in rejected and "approval rejected" in rejected
    # The replay shows the call waiting, then approved, then done.
    states = [
        re.search(r'data-status="(\w+)"', f["html"]).group(1)
        for f in replay_data(html)["frames"]
        if f["seq"] == 2
    ]
    assert states == ["waiting_approval", "approved", "succeeded"]


def test_the_list_filters_search_and_paginates(alice, bob, operator, demo, model):
    model(
        Script(
            [
                tool_call("search_notes", {"keyword": "Redis"}),
                text("Redis is in 缓存改造"),
                text("plain hello"),
                tool_call("send_email", EMAIL),
                text("bob's answer"),
            ]
        )
    )
    tainted = ask(alice, demo.agent, "find redis")
    plain = ask(alice, demo.agent, "say hello")
    waiting = ask(alice, demo.agent, "mail the report")
    bobs = ask(bob, demo.agent, "bob asks")
    Task.objects.filter(pk=plain.pk).update(
        created_at=timezone.now() - timedelta(days=3)
    )

    def ids(user, query=""):
        return set(listed(page(user, "/traces/" + query)))

    every = {str(t.pk) for t in (tainted, plain, waiting, bobs)}
    assert ids(operator) == every
    assert ids(alice) == every - {str(bobs.pk)}
    assert ids(operator, "?user=bob") == {str(bobs.pk)}
    assert ids(alice, "?status=waiting_approval") == {str(waiting.pk)}
    assert ids(alice, "?stop_reason=final_answer") == {str(tainted.pk), str(plain.pk)}
    assert ids(alice, "?agent=assistant") == ids(alice)
    assert ids(alice, "?agent=nobody") == set()
    assert ids(alice, "?tool=search_notes") == {str(tainted.pk)}
    assert ids(alice, "?approvals=yes") == {str(waiting.pk)}
    assert str(waiting.pk) not in ids(alice, "?approvals=no")
    assert ids(alice, "?tainted=yes") == {str(tainted.pk)}
    assert str(tainted.pk) not in ids(alice, "?tainted=no")
    assert ids(alice, "?q=缓存改造") == {str(tainted.pk)}  # in an answer
    assert ids(alice, "?q=MAIL+THE") == {str(waiting.pk)}  # in a goal
    day = (timezone.now() - timedelta(days=1)).date().isoformat()
    assert str(plain.pk) not in ids(alice, f"?since={day}")
    assert ids(alice, f"?until={day}") == {str(plain.pk)}
    assert ids(alice, f"?conversation={tainted.conversation_id}") == {str(tainted.pk)}
    assert ids(alice, "?origin=fork") == set()
    html = page(operator, "/traces/")
    for column in ("Goal", "User", "Agent", "Status", "Stop reason", "Steps", "Tokens",
                   "Duration", "Started"):  # fmt: skip
        assert f"<th>{column}</th>" in html


def test_the_list_pages_fifty_runs_at_a_time(alice, demo):
    conversation = runs.conversation_create(owner=alice, agent=demo.agent)
    for n in range(51):
        Task.objects.create(
            conversation=conversation, agent=demo.agent, owner=alice, model="m",
            goal=f"goal {n}", status="succeeded",
            created_at=timezone.now() - timedelta(minutes=n),
        )  # fmt: skip

    first = page(alice, "/traces/")
    second = page(alice, "/traces/?page=2")

    assert len(listed(first)) == 50 and len(listed(second)) == 1
    assert "goal 0<" in first and "goal 50<" in second
    assert "page 1 of 2" in first


def test_the_stats_page_charts_calls_failures_latency_tokens_stops_and_approvals(
    alice, bob, operator, demo, model
):
    model(
        Script(
            [
                tool_calls(
                    [
                        ("calculate", {"expression": "1 + 1"}),
                        ("calculate", {"expression": "1 / 0"}),
                    ]
                ),
                text("2"),
                tool_call("send_email", EMAIL),
                text("sent"),
                tool_call("send_email", EMAIL),
                text("refused"),
                text("bob"),
            ]
        )
    )
    ask(alice, demo.agent, "compute")
    sent = decide(ask(alice, demo.agent, "mail"), operator, "approve")
    refused = decide(ask(alice, demo.agent, "mail"), operator, "reject", reason="no")
    assert sent.status == refused.status == "succeeded"
    ask(bob, demo.agent, "bob")

    html = page(alice, "/traces/stats/")

    row = re.search(r'<tr data-tool="calculate">(.*?)</tr>', html).group(1)
    assert re.findall(r"<td>([^<]*)</td>", row)[:3] == ["2", "1", "50 %"]
    assert (
        '<tr data-tool="send_email"><td><code>send_email</code></td><td>2</td>' in html
    )
    stops = re.search(r'data-testid="stop-stats">(.*?)</table>', html, re.S).group(1)
    assert "<td>final_answer</td><td>3</td>" in stops  # alice's runs only
    approvals = re.search(r'data-testid="approval-stats">(.*?)</table>', html, re.S)
    assert "<td>approved</td><td>1</td>" in approvals.group(1)
    assert "<td>rejected</td><td>1</td>" in approvals.group(1)
    assert "over 2 decisions" in approvals.group(1)
    tokens = re.search(r'data-testid="token-stats">(.*?)</table>', html, re.S).group(1)
    assert "scripted-model" in tokens
    # And cost per model per day (tests/runs/test_costs.py).
    assert html.count('data-testid="chart"') == 7
    assert html.count('<svg class="chart"') == 7
    assert "<script" not in html.split("</main>")[0].split("<main")[1]
    # The auditor sees bob's run too.
    assert "<td>final_answer</td><td>4</td>" in page(operator, "/traces/stats/")


def test_the_agent_filters_name_only_agents_of_runs_the_viewer_sees(
    alice, bob, operator, demo, model
):
    model(Script([text("bob's answer")]))
    Agent.objects.create(name="bobs-desk")  # a run of bob's only
    ask(bob, Agent.objects.get(name="bobs-desk"), "bob asks")
    agent_filter = re.compile(r'<select name="agent">(.*?)</select>', re.S)

    for path in ("/traces/", "/traces/stats/"):
        mine = agent_filter.search(page(alice, path)).group(1)
        everyone = agent_filter.search(page(operator, path)).group(1)
        assert "bobs-desk" not in mine, path
        assert "bobs-desk" in everyone, path
