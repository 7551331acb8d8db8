"""Triggers over HTTP: good, unsigned, forged, stale and replayed signatures,
the template, the rate; real Redis for the replay and rate checks."""

from __future__ import annotations

import json
import re
import time

import pytest
from rest_framework.test import APIClient

from audit.models import AuditEvent, AuditKind
from automations import services
from automations.models import Trigger
from automations.signing import sign
from runs.models import Task
from tests.support.clients import logged_in

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("flush_redis")]

TEMPLATE = "New ticket from {customer}: {subject}\nLabels: {labels}"


@pytest.fixture
def trigger(alice, operator, demo) -> tuple[Trigger, str]:
    return services.trigger_create(
        name="support inbox",
        owner=alice,
        agent=demo.agent,
        template=TEMPLATE,
        user=operator,
        rate_per_min=3,
    )


def post(trigger: Trigger, body: bytes, header: str | None) -> object:
    headers = {"HTTP_X_REACH_SIGNATURE": header} if header is not None else {}
    return APIClient().generic(
        "POST",
        f"/api/triggers/{trigger.pk}/",
        body,
        content_type="application/json",
        **headers,
    )


def body_of(**fields: object) -> bytes:
    return json.dumps(fields, ensure_ascii=False).encode()


GOOD = {"customer": "Zoë", "subject": "refund", "labels": ["billing", "urgent"]}


def refusals(reason: str) -> int:
    return AuditEvent.objects.filter(
        kind=AuditKind.TRIGGER_REFUSED, data__reason=reason
    ).count()


def test_a_signed_body_starts_a_run_with_the_templated_message(trigger, alice):
    trigger, secret = trigger
    body = body_of(**GOOD)
    answer = post(trigger, body, sign(secret, body, int(time.time())))

    assert answer.status_code == 202, answer.content
    data = answer.json()
    task = Task.objects.get(pk=data["task"])
    assert data["conversation"] == str(task.conversation_id)
    assert task.owner == alice and task.source == f"trigger:{trigger.pk}"
    assert task.goal == 'New ticket from Zoë: refund\nLabels: ["billing", "urgent"]'
    assert AuditEvent.objects.filter(
        kind=AuditKind.TRIGGER_FIRED, task_id=str(task.pk)
    ).exists()


def test_the_secret_is_kept_sealed_not_in_clear(trigger):
    trigger, secret = trigger
    assert secret not in trigger.secret_sealed
    assert len(secret) == 64


def test_an_unsigned_body_is_401_and_audited(trigger):
    trigger, _ = trigger
    answer = post(trigger, body_of(**GOOD), None)
    assert answer.status_code == 401
    assert "X-Reach-Signature" in answer.json()["error"]
    assert refusals("unsigned") == 1
    assert not Task.objects.exists()


def test_a_forged_signature_is_401_and_audited(trigger):
    trigger, secret = trigger
    body = body_of(**GOOD)
    now = int(time.time())
    wrong_secret = post(trigger, body, sign("not-the-secret", body, now))
    tampered = post(
        trigger, body_of(**GOOD | {"subject": "x"}), sign(secret, body, now)
    )

    for answer in (wrong_secret, tampered):
        assert answer.status_code == 401
        assert answer.json()["reason"] == "forged"
        assert "does not match" in answer.json()["error"]
    assert refusals("forged") == 2
    assert not Task.objects.exists()


def test_a_stale_timestamp_is_401(trigger):
    trigger, secret = trigger
    body = body_of(**GOOD)
    old = int(time.time()) - 301
    answer = post(trigger, body, sign(secret, body, old))
    assert answer.status_code == 401
    assert answer.json()["reason"] == "stale"
    assert "more than 300 s" in answer.json()["error"]
    assert refusals("stale") == 1


def test_a_replayed_signature_is_409_and_starts_nothing_more(trigger):
    trigger, secret = trigger
    body = body_of(**GOOD)
    header = sign(secret, body, int(time.time()))
    assert post(trigger, body, header).status_code == 202
    again = post(trigger, body, header)

    assert again.status_code == 409
    assert again.json()["reason"] == "replayed"
    assert Task.objects.count() == 1
    assert refusals("replayed") == 1


def test_a_body_without_a_field_of_the_template_is_400_naming_it(trigger):
    trigger, secret = trigger
    body = body_of(customer="Zoë", labels=[])
    answer = post(trigger, body, sign(secret, body, int(time.time())))
    assert answer.status_code == 400
    assert answer.json()["error"] == (
        "The body has no field 'subject', which the template needs."
    )
    assert not Task.objects.exists()


def test_over_its_rate_a_trigger_answers_429(trigger):
    trigger, secret = trigger
    answers = []
    for number in range(4):
        body = body_of(**GOOD | {"subject": f"s{number}"})
        answers.append(post(trigger, body, sign(secret, body, int(time.time()))))
    assert [a.status_code for a in answers] == [202, 202, 202, 429]
    assert "at most 3 runs a minute" in answers[-1].json()["error"]
    assert refusals("rate_limited") == 1


def test_a_disabled_trigger_or_an_unknown_one_starts_nothing(trigger):
    trigger, secret = trigger
    Trigger.objects.filter(pk=trigger.pk).update(enabled=False)
    trigger.refresh_from_db()
    body = body_of(**GOOD)
    assert post(trigger, body, sign(secret, body, int(time.time()))).status_code == 403
    trigger.pk = "00000000-0000-0000-0000-000000000000"
    assert post(trigger, body, sign(secret, body, int(time.time()))).status_code == 404


def test_an_owner_who_may_not_use_the_agent_gets_no_run(trigger, bob, demo):
    trigger, secret = trigger
    demo.agent.allowed_users.add(bob)
    body = body_of(**GOOD)
    answer = post(trigger, body, sign(secret, body, int(time.time())))
    assert answer.status_code == 403
    assert "may no longer use assistant" in answer.json()["error"]
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    "template",
    ["{body.__class__}", "{items[0]}", "{name!r}", "{amount:>10}", "{unclosed"],
)
def test_a_template_that_reaches_into_the_body_is_refused(template):
    with pytest.raises(services.TemplateError):
        services.template_fields(template)


def test_the_schema_documents_the_trigger_endpoint(api_client_for, alice):
    schema = api_client_for(alice).get("/api/schema/?format=json").json()
    operation = schema["paths"]["/api/triggers/{trigger_id}/"]["post"]
    assert {"202", "401", "409", "429"} <= set(operation["responses"])
    assert any(p["name"] == "X-Reach-Signature" for p in operation["parameters"])


def test_the_admin_shows_a_new_triggers_secret_once_and_it_signs(admin_user, demo):
    admin = admin_user
    browser = logged_in(admin)
    added = browser.post(
        "/admin/automations/trigger/add/",
        {
            "name": "from the admin",
            "owner": admin.pk,
            "agent": demo.agent.pk,
            "template": "Ticket: {subject}",
            "rate_per_min": 5,
            "enabled": "on",
        },
        follow=True,
    )
    shown = re.search(r"the secret ([0-9a-f]{64})", added.content.decode())
    assert shown, "the secret is shown on saving"
    trigger = Trigger.objects.get(name="from the admin")
    assert shown.group(1) not in trigger.secret_sealed
    # Shown once: the change page does not show it again.
    page = browser.get(f"/admin/automations/trigger/{trigger.pk}/change/")
    assert shown.group(1) not in page.content.decode()
    assert AuditEvent.objects.filter(
        kind=AuditKind.TRIGGER_CREATED, object_id=str(trigger.pk)
    ).exists()

    body = body_of(subject="printer on fire")
    answer = post(trigger, body, sign(shown.group(1), body, int(time.time())))
    assert answer.status_code == 202
    assert Task.objects.get(pk=answer.json()["task"]).goal == "Ticket: printer on fire"


def test_the_admin_refuses_a_template_that_reaches_into_the_body(admin_user, demo):
    admin = admin_user
    answer = logged_in(admin).post(
        "/admin/automations/trigger/add/",
        {
            "name": "sneaky",
            "owner": admin.pk,
            "agent": demo.agent.pk,
            "template": "{subject.__class__}",
            "rate_per_min": 5,
        },
    )
    assert answer.status_code == 200
    assert "attributes, indexes, conversions and formats are not allowed" in (
        answer.content.decode()
    )
    assert not Trigger.objects.filter(name="sneaky").exists()
