"""The trace importer with mutated documents, under Hypothesis.

A valid ``reach.trace/v1`` document is mutated (values replaced by any JSON,
keys dropped or added, list items repeated) and posted to
``POST /api/traces/import/`` by an auditor. Every answer is a 201 — and then the
imported run exports, re-runs and renders — or a 400 that says what is wrong,
with nothing written: an import is all or nothing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.models import AuditEvent
from runs.models import Conversation, Message, Step, Task
from tests.fuzz.strategies import fuzz_settings, json_values
from tests.support.clients import bearer_client, logged_in, post_json
from tests.support.samples import trace

pytestmark = pytest.mark.django_db

Path = tuple[str | int, ...]

#: Values the importer reads, so mutations land near the edges it checks.
plausible = st.one_of(
    json_values,
    st.sampled_from(
        ["succeeded", "running", "failed", "model_call", "tool_call", "note"]
        + ["final_answer", "max_steps", "calculate", "t-1:1:0", "reach.trace/v1"]
        + ["2026-01-02T03:04:05+00:00", "2026-01-02", "0001-01-01T00:00:00+14:00"]
        + ["9999-12-31T23:59:59-14:00", "2026-13-45T25:61:00"]
    ),
    st.sampled_from([0, -1, 1, 2, 3, 2**31, 2**63, 2**70, 1.5, True]),
)


def _paths(document: Any) -> list[Path]:
    """Every path to a value inside ``document`` (the root excluded)."""
    found: list[Path] = []
    stack: list[tuple[Any, Path]] = [(document, ())]
    while stack:
        node, path = stack.pop()
        if path:
            found.append(path)
        if isinstance(node, dict):
            stack.extend((v, (*path, k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(node))
    return found


def _parent(document: Any, path: Path) -> Any:
    node = document
    for key in path[:-1]:
        node = node[key]
    return node


@st.composite
def mutated_documents(draw: Any) -> dict[str, Any]:
    document = trace()
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(document)
        if not paths:
            break
        path = draw(st.sampled_from(sorted(paths, key=repr)))
        parent, key = _parent(document, path), path[-1]
        action = draw(
            st.sampled_from(["replace", "replace", "delete", "add", "repeat"])
        )
        if action == "replace":
            parent[key] = draw(plausible)
        elif action == "delete":
            del parent[key]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = draw(plausible)
        elif action == "repeat" and isinstance(parent, list):
            parent.append(json.loads(json.dumps(parent[key])))
    return document


def counts() -> dict[str, int]:
    return {
        model.__name__: model.objects.count()
        for model in (Conversation, Task, Step, Message, AuditEvent)
    }


@fuzz_settings(80)
@given(document=mutated_documents())
def test_a_mutated_trace_imports_whole_or_is_refused_with_nothing_written(
    document: dict[str, Any], operator: Any, demo: Any
) -> None:
    client = bearer_client(operator)
    before = counts()

    response = post_json(client, "/api/traces/import/", document)

    assert response.status_code in (201, 400), (response.status_code, document)
    answer = response.json()
    if response.status_code == 400:
        assert isinstance(answer.get("error"), str), answer
        assert counts() == before, answer
        return
    task = Task.objects.get(pk=answer["task"])
    assert task.steps.count() == len(document["steps"])
    after = counts()
    assert after["Task"] == before["Task"] + 1
    assert after["Step"] == before["Step"] + len(document["steps"])
    # What was taken in can be read back in every way a run can.
    assert client.get(f"/api/tasks/{task.pk}/trace/").status_code == 200
    assert client.post(f"/api/tasks/{task.pk}/rerun/").status_code == 200
    page = logged_in(operator).get(f"/traces/{task.pk}/")
    assert page.status_code == 200
