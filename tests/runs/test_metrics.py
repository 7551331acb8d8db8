"""``/metrics``: Prometheus text with tasks, tools, model and approvals."""

from __future__ import annotations

import pytest
from django.test import Client

from runs import services as runs
from tests.support.scripted_model import RedisScript, ScriptedModel

pytestmark = pytest.mark.django_db(transaction=True)


def test_metrics_count_tasks_tool_calls_and_latencies(alice, demo, use_model):
    with ScriptedModel(RedisScript()) as server:
        use_model(server)
        conversation = runs.conversation_create(owner=alice, agent=demo.agent)
        task = runs.task_start(
            conversation=conversation,
            content="项目笔记里哪个方案提到 Redis？找到其中的预算表达式并计算总和。",
        )
        runs.task_advance(task_id=task.pk)
    response = Client().get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert 'reach_tasks{status="succeeded"} 1' in text
    assert 'reach_tool_calls_total{tool="calculate",status="succeeded"} 1' in text
    assert "reach_model_calls_total 3" in text
    assert "reach_model_errors_total 0" in text
    assert "reach_model_latency_seconds_count 3" in text
    assert 'reach_tool_latency_seconds{tool="search_notes",quantile="0.95"}' in text
    assert "reach_approvals_pending 0" in text
    for line in text.splitlines():
        assert line.startswith("#") or " " in line
