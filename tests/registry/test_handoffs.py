"""Handoff targets of an agent: the admin's inline, the flag, the snapshot, audit."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.models import AuditEvent, AuditKind
from registry.models import Agent, Handoff
from registry.services import agent_handoffs_set, agent_snapshot_of
from tests.support.admin_forms import admin_form_data
from tests.support.clients import logged_in

pytestmark = pytest.mark.django_db


def test_an_admin_adds_a_handoff_target_inline_and_it_is_flagged_and_audited(demo):
    billing = Agent.objects.create(name="billing", description="Billing desk.")
    admin = logged_in(demo.admin)
    url = f"/admin/registry/agent/{demo.agent.pk}/change/"
    page = admin.get(url)
    assert b"Handoffs: agents it may hand the conversation to" in page.content
    data = admin_form_data(page)
    data.update(
        {
            "handoffs-TOTAL_FORMS": "1",
            "handoffs-0-target": str(billing.pk),
            "handoffs-0-description": "Refunds and invoices.",
        }
    )

    response = admin.post(url, data)

    assert response.status_code == 302, response.content[:3000]
    demo.agent.refresh_from_db()
    assert demo.agent.has_handoffs
    assert agent_snapshot_of(demo.agent).handoffs == (
        {"agent": "billing", "description": "Refunds and invoices."},
    )
    event = AuditEvent.objects.get(
        kind=AuditKind.AGENT_HANDOFFS_CHANGED, object_id="assistant"
    )
    assert (event.object_id, event.actor) == ("assistant", "admin")
    # The names only: the audit log carries no text.
    assert event.data == {"targets": ["billing"]}

    # Removed again: the flag goes, and that is audited too.
    data = admin_form_data(admin.get(url))
    data["handoffs-0-DELETE"] = "on"
    assert admin.post(url, data).status_code == 302
    demo.agent.refresh_from_db()
    assert not demo.agent.has_handoffs
    assert not Handoff.objects.filter(source=demo.agent).exists()
    changes = AuditEvent.objects.filter(
        kind=AuditKind.AGENT_HANDOFFS_CHANGED, object_id="assistant"
    )
    assert [e.data for e in changes.order_by("position")][1] == {"targets": []}


def test_an_agent_without_targets_takes_its_snapshot_without_reading_handoffs(demo):
    with CaptureQueriesContext(connection) as plain:
        assert agent_snapshot_of(demo.agent, user=demo.alice).handoffs == ()
    assert not any("handoff" in q["sql"] for q in plain.captured_queries)
    triage = Agent.objects.get(name="triage")
    with CaptureQueriesContext(connection) as targeted:
        assert [t["agent"] for t in agent_snapshot_of(triage).handoffs] == ["assistant"]
    assert sum("handoff" in q["sql"] for q in targeted.captured_queries) == 1


def test_an_agent_cannot_hand_off_to_itself_or_to_a_name_too_long_for_a_tool(demo):
    with pytest.raises(ValidationError, match="cannot hand off to itself"):
        agent_handoffs_set(agent=demo.agent, targets=[(demo.agent, "me")])
    long = Agent.objects.create(name="x" * 60)
    with pytest.raises(ValidationError, match="longer than 52 characters"):
        agent_handoffs_set(agent=demo.agent, targets=[(long, "far")])
    demo.agent.refresh_from_db()
    assert not demo.agent.has_handoffs


def test_the_demo_triage_agent_hands_off_to_the_assistant(demo):
    triage = Agent.objects.get(name="triage")
    assert triage.has_handoffs and not triage.is_default
    assert list(triage.handoff_targets.all()) == [demo.agent]
    snapshot = agent_snapshot_of(triage, user=demo.alice)
    assert snapshot.tools == ()
    assert "transfer_to_assistant" in snapshot.instructions


def test_the_agent_list_names_each_agents_handoff_targets(demo, api_client_for):
    listed = {
        a["name"]: a for a in api_client_for(demo.alice).get("/api/agents/").json()
    }
    assert listed["triage"]["handoffs"] == ["assistant"]
    assert listed["assistant"]["handoffs"] == []
