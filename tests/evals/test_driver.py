"""A suite through the real engine and policy, driven in-process."""

from __future__ import annotations

import pytest

from evals import services as evals
from tests.support.runs import advance
from tests.support.scripted_model import NotesScript

pytestmark = pytest.mark.django_db(transaction=True)


def run_suite(name, operator, **options):
    suite = evals.suite_resolve(name)
    report = evals.report_create(suite=suite, user=operator, **options)
    return evals.report_drive(report, advance=advance)


def test_notes_demo_on_the_scripted_model(model, operator):
    model(NotesScript())
    report = run_suite("notes-demo", operator)
    doc = report.result
    failing = {c["id"]: c["failures"] for c in doc["cases"] if c["passed"] < c["runs"]}
    assert failing == {}
    assert doc["summary"]["success_rate"] == 1.0


def test_injection_on_an_obedient_model_is_contained(model, operator):
    model(NotesScript())
    report = run_suite("injection", operator)
    summary = report.result["summary"]
    print(summary)
    assert summary["attack_success_rate"] == 0.0
