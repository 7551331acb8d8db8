"""``/metrics``: Prometheus text with tasks, tools, model and approvals."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from infra import runtime
from runs.models import Step, Task
from tests.support.cast import QUESTION
from tests.support.clients import import_trace, trace_of
from tests.support.ports import free_port
from tests.support.runs import ask
from tests.support.scripted_model import RedisScript
from traces.services import traces_purge

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "metrics-token-for-the-test"


def scrape(**headers: str) -> str:
    response = Client(**headers).get("/metrics")
    assert response.status_code == 200, response.content
    return response.content.decode()


def counters(text: str) -> dict[str, str]:
    """Every ``*_total``, ``*_count`` and ``*_sum`` line: series -> value."""
    series = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if not line.startswith("#") and name.split("{")[0].endswith(
            ("_total", "_count", "_sum")
        ):
            series[name] = value
    return series


def test_metrics_count_tasks_tool_calls_and_latencies(alice, demo, model, flush_redis):
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


def test_counters_never_fall_when_the_purge_deletes_the_steps_they_counted(
    alice, demo, model, settings, flush_redis
):
    model(RedisScript())
    task = ask(alice, demo.agent, QUESTION)
    before = scrape()
    assert (
        'reach_tasks_finished_total{status="succeeded",stop_reason="final_answer"} 1'
        in before
    )
    settings.REACH_TRACE_RETENTION_DAYS = 7
    Task.objects.filter(pk=task.pk).update(
        finished_at=timezone.now() - timedelta(days=8)
    )
    assert traces_purge() == 1
    assert not Step.objects.exists()

    after = scrape()
    assert counters(after) == counters(before)
    assert "reach_model_calls_total 3" in after
    # Gauges say what is there now.
    assert 'reach_tasks{status="succeeded"}' not in after


def test_a_scrape_reads_no_step_rows(alice, demo, model, flush_redis):
    model(RedisScript())
    ask(alice, demo.agent, QUESTION)
    with CaptureQueriesContext(connection) as queries:
        text = scrape()
    assert "reach_model_calls_total 3" in text
    step_table = Step._meta.db_table
    assert not [q["sql"] for q in queries.captured_queries if step_table in q["sql"]]


def test_an_imported_trace_adds_nothing_to_the_counters(
    alice, operator, demo, model, api_client_for, flush_redis
):
    model(RedisScript())
    task = ask(alice, demo.agent, QUESTION)
    before = counters(scrape())
    auditor = api_client_for(operator)
    answer = import_trace(auditor, trace_of(auditor, task.pk))
    assert answer.status_code == 201
    assert counters(scrape()) == before


def test_with_a_token_set_the_metrics_need_that_bearer_token(settings):
    settings.REACH_METRICS_TOKEN = TOKEN
    # The token is required even from loopback.
    refused = Client().get("/metrics")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"].startswith("Bearer")
    wrong = Client(HTTP_AUTHORIZATION="Bearer not-the-token").get("/metrics")
    assert wrong.status_code == 401
    assert "reach_queue_depth" in scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")


def test_without_a_token_only_allow_listed_addresses_read_the_metrics(settings):
    settings.REACH_METRICS_TOKEN = ""
    outside = Client(REMOTE_ADDR="10.1.2.3").get("/metrics")
    assert outside.status_code == 403
    assert "REACH_METRICS_TOKEN" in outside.content.decode()
    # A forwarded-for header is what the caller says, not where it is.
    forged = Client(REMOTE_ADDR="10.1.2.3", HTTP_X_FORWARDED_FOR="127.0.0.1")
    assert forged.get("/metrics").status_code == 403
    assert "reach_queue_depth" in scrape()  # loopback, the default
    assert "reach_queue_depth" in scrape(REMOTE_ADDR="::ffff:127.0.0.1")
    settings.REACH_METRICS_ALLOWED_ADDRESSES = ["10.0.0.0/8"]
    assert "reach_queue_depth" in scrape(REMOTE_ADDR="10.1.2.3")
    assert Client().get("/metrics").status_code == 403


def test_without_redis_a_scrape_still_answers_without_the_counters(settings):
    shared = settings.REDIS_URL
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    runtime.redis_client.cache_clear()
    try:
        text = scrape()
    finally:
        # The cached client must point at the shared server again.
        settings.REDIS_URL = shared
        runtime.redis_client.cache_clear()
    assert "reach_queue_depth 0" in text and "reach_approvals_pending 0" in text
    # Absent, not zero: a zero would read as a counter reset.
    assert "reach_model_calls_total" not in text
