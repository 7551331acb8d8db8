"""The whole product on real processes: Redis, a Celery worker, the web server and
the model."""

from __future__ import annotations

import json

import pytest
from websockets.sync.client import connect

from tests.support.cast import QUESTION
from tests.support.clients import bearer_headers, session_cookie
from tests.support.runs import start
from tests.support.stack import Stack, ask_over_api
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.integration]


def test_the_redis_question_end_to_end_over_http_and_a_real_websocket(
    stack: Stack, alice, api_client_for
):
    stack.start_model("redis", latency=0.3)
    stack.start_worker()
    stack.start_web()
    http = stack.api(bearer_headers(alice))
    task_id = ask_over_api(http, QUESTION)

    ws_url = stack.web_url.replace("http", "ws") + f"/ws/tasks/{task_id}/"
    headers = {"Cookie": f"sessionid={session_cookie(alice)}", "Origin": stack.web_url}
    steps: dict[int, dict] = {}
    live_frames = 0
    resumed = False

    def final_task() -> dict | None:
        """Read one message; the task once a task event says it has ended."""
        nonlocal live_frames, resumed
        message = json.loads(ws.recv(timeout=30))
        if message["type"] == "step":
            step = message["step"]
            if step["rev"] >= steps.get(step["seq"], {}).get("rev", -1):
                steps[step["seq"]] = step
            if resumed:
                live_frames += 1
        elif message["type"] == "task":
            resumed = True
            if message["task"]["status"] in ("succeeded", "stopped", "failed"):
                return message["task"]
        return None

    with connect(ws_url, additional_headers=headers, open_timeout=10) as ws:
        ws.send(json.dumps({"type": "resume", "after": 0}))
        final = wait_for(
            final_task,
            60,
            interval=0,
            what="the run's final task event",
            detail=lambda: stack.procs["worker"].output()[-3000:],
        )

    assert final is not None, stack.procs["worker"].output()[-3000:]
    assert final["status"] == "succeeded", final
    assert "缓存改造" in final["final_answer"] and "1088" in final["final_answer"]
    assert live_frames > 0, "every step came from the resume, none live"
    ordered = [steps[seq] for seq in sorted(steps)]
    assert [(s["kind"], s["tool"]) for s in ordered] == [
        ("model_call", None),
        ("tool_call", "search_notes"),
        ("model_call", None),
        ("tool_call", "calculate"),
        ("model_call", None),
    ]
    assert ordered[1]["arguments"] == {"keyword": "Redis"}
    assert ordered[3]["arguments"] == {"expression": "128 * 6 + 320"}
    assert ordered[3]["result"]["result"] == 1088
    assert all(s["status"] == "succeeded" for s in ordered)
    assert all(s["duration_ms"] is not None for s in ordered)
    # The same steps are in the API, as the reload of the page shows them.
    api_steps = http.get(f"/api/tasks/{task_id}/steps/").json()["steps"]
    assert [s["seq"] for s in api_steps] == [1, 2, 3, 4, 5]


def test_the_socket_refuses_a_foreign_origin_and_another_user(
    stack: Stack, alice, bob, demo
):

    stack.start_web()
    task = start(alice, demo.agent)
    ws_url = stack.web_url.replace("http", "ws") + f"/ws/tasks/{task.pk}/"
    for cookie_user, origin in [
        (alice, "http://evil.example.com"),
        (bob, stack.web_url),
    ]:
        headers = {
            "Cookie": f"sessionid={session_cookie(cookie_user)}",
            "Origin": origin,
        }
        with (
            pytest.raises(Exception),  # noqa: B017 - refused handshake or close
            connect(ws_url, additional_headers=headers, open_timeout=10) as ws,
        ):
            ws.recv(timeout=5)
