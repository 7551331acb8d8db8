"""``/metrics``: Prometheus text with tasks, tools, model and approvals."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.support.cast import QUESTION
from tests.support.runs import ask
from tests.support.scripted_model import RedisScript

pytestmark = pytest.mark.django_db(transaction=True)


def test_metrics_count_tasks_tool_calls_and_latencies(alice, demo, model):
    model(RedisScript())
    ask(alice, demo.agent, QUESTION)
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
