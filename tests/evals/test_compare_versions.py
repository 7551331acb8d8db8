"""Comparing two versions of an agent on the same cases: the command, the page
and the promote that follows (registry.versions)."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from audit.models import AuditEvent
from evals import services as evals
from evals.models import EvalReport
from reach_site.demo import seed_demo_versions
from registry import versions
from runs.models import Task
from tests.support.clients import logged_in
from tests.support.replies import text
from tests.support.runs import advance
from tests.support.scripted_model import NotesScript, content_text, messages_of

pytestmark = pytest.mark.django_db(transaction=True)

#: What the demo's candidate (v2) adds to the instructions.
CANDIDATE_MARK = "give the total first"

SUITE = {
    "name": "versions-demo",
    "agent": "assistant",
    "runs": 2,
    "cases": [
        {
            "id": "arithmetic",
            "input": "19 * 23 - 7 等于多少？",
            "expect": {"answer_contains": ["430"], "stop_reason": "final_answer"},
        },
        {
            "id": "log-retention",
            "input": "「日志系统」保留多少天的记录？",
            "expect": {"answer_regex": "七|7", "tools": ["search_notes"]},
        },
    ],
}


class ProductionForgetsToCalculate(NotesScript):
    """The demo model, but under the production instructions (v1) it answers
    the sum from memory, wrongly; the candidate's (v2) make it calculate."""

    def respond(self, request):
        system = content_text(messages_of(request)[0].get("content"))
        if CANDIDATE_MARK not in system and "19 * 23" in str(request["messages"]):
            return text("19 * 23 - 7 等于 450。")
        return super().respond(request)


@pytest.fixture
def inline_drive(monkeypatch):
    """The command's driver runs the worker's part inline."""
    original = evals.report_drive
    monkeypatch.setattr(
        evals,
        "report_drive",
        lambda report, **kw: original(report, advance=advance, **kw),
    )


def test_the_command_runs_both_versions_and_prints_per_case_which_did_better(
    model, operator, demo, capsys, tmp_path, inline_drive
):
    model(ProductionForgetsToCalculate())
    seed_demo_versions()
    suite = tmp_path / "versions.json"
    suite.write_text(json.dumps(SUITE))

    call_command(
        "eval",
        str(suite),
        "--agent",
        "assistant@candidate",
        "--compare",
        "production",
        "--as",
        "operator",
    )

    out = capsys.readouterr().out
    assert "assistant v2 compared with assistant v1" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    # Two runs a side: better, but the intervals still overlap.
    assert lines["arithmetic"].endswith(
        " 0/2     0% (0.00-0.66)  2/2   100% (0.34-1.00)  BETTER (intervals overlap)"
    )
    assert lines["log-retention"].endswith("SAME")
    assert "1 better, 0 worse, 1 the same · success 50% -> 100%" in out
    assert "manage.py agent_label assistant v2 --to production" in out
    # Each report's runs ran its version, and say so.
    v1, v2 = EvalReport.objects.order_by("created_at")
    assert (v1.agent_version, v2.agent_version) == (2, 1)
    for report in (v1, v2):
        tasks = Task.objects.filter(eval_case__report=str(report.pk))
        assert {t.agent_version for t in tasks} == {report.agent_version}


def test_the_json_document_carries_both_reports_and_the_changes(
    model, operator, demo, capsys, tmp_path, inline_drive
):
    model(ProductionForgetsToCalculate())
    seed_demo_versions()
    suite = tmp_path / "versions.json"
    suite.write_text(json.dumps(SUITE))

    call_command(
        "eval",
        str(suite),
        "--agent",
        "assistant@v2",
        "--compare",
        "v1",
        "--runs",
        "4",
        "--json",
        "--as",
        "operator",
    )

    document = json.loads(capsys.readouterr().out)
    assert document["agent_version"] == 2
    assert document["baseline"]["agent_version"] == 1
    changes = {c["id"]: c for c in document["changes"]}
    arithmetic = changes["arithmetic"]
    assert arithmetic["verdict"] == "better"
    # 0/4 against 4/4: the intervals part, a change more runs would keep.
    assert arithmetic["before"]["passed"] == 0 and arithmetic["after"]["passed"] == 4
    low, high = (
        arithmetic["after"]["success_ci95"][0],
        arithmetic["before"]["success_ci95"][1],
    )
    assert arithmetic["clear"] is True and high < low
    assert changes["log-retention"]["verdict"] == "same"
    assert changes["log-retention"]["clear"] is False


def test_the_page_compares_two_versions_and_promotes_the_better(
    model, operator, demo, inline_drive
):
    model(ProductionForgetsToCalculate())
    seed_demo_versions()
    evals.suite_upload(SUITE)
    client = logged_in(operator)

    started = client.post(
        "/evals/",
        {
            "suite": "versions-demo",
            "agent": "assistant",
            "version": "candidate",
            "compare": "production",
        },
    )

    assert started.status_code == 302, started.content.decode()[:2000]
    for report in EvalReport.objects.all():
        evals.report_drive(report)
    page = client.get(started["Location"]).content.decode()
    assert "assistant v2 compared with assistant v1" in page
    assert 'data-case="arithmetic" data-verdict="better"' in page
    assert 'data-case="log-retention" data-verdict="same"' in page
    # The operator may run evaluations, not move what chats run.
    assert 'data-testid="promote"' not in page
    candidate = EvalReport.objects.get(agent_version=2)
    refused = client.post(f"/evals/{candidate.pk}/promote/")
    assert refused.status_code == 403
    assert versions.version_resolve(demo.agent).number == 1

    admin = logged_in(demo.admin)
    page = admin.get(started["Location"]).content.decode()
    assert 'data-testid="promote"' in page
    promoted = admin.post(f"/evals/{candidate.pk}/promote/")
    assert promoted.status_code == 302
    assert versions.version_resolve(demo.agent).number == 2
    event = AuditEvent.objects.filter(kind="agent.label_moved").last()
    assert event.actor == "admin"
    assert event.data == {"label": "production", "from": 1, "to": 2}
    after = admin.get(started["Location"]).content.decode()
    assert "production is now v2" in after and 'data-testid="promote"' not in after


def test_a_reference_to_no_such_version_is_refused(operator, demo):
    suite = evals.suite_upload(SUITE)
    seed_demo_versions()
    # "@label" alone: a version of the suite's agent.
    report = evals.report_create(suite=suite, user=operator, agent="@candidate")
    assert (report.agent.name, report.agent_version) == ("assistant", 2)
    with pytest.raises(evals.EvalError, match="no version v9"):
        evals.report_create(suite=suite, user=operator, agent="assistant@v9")
    with pytest.raises(evals.EvalError, match="no version nope"):
        evals.report_create(suite=suite, user=operator, agent="assistant@nope")
