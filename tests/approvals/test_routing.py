"""Approver routing (approvals.routing): the demo's two routes, refunds (a mail
about a refund: payments) and deploys (a ticket about a deploy: release), decide
who sees, is told and decides; escalation, out of office and delegation; no
route, no change."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from approvals.models import ApprovalRequest, ApprovalRoute, ApproverAway
from approvals.routing import route_for
from approvals.selectors import approvers_for, may_decide
from approvals.services import approval_decide, approvals_escalate
from audit.models import AuditEvent, AuditKind
from effects.models import Outbox
from notify.models import Delivery, NotifyTarget
from notify.payloads import event_payload
from tests.support.cast import EMAIL, PASSWORD
from tests.support.clients import logged_in, post_decision
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask, pending, user_in
from tests.support.sockets import next_frame, queue_socket

pytestmark = pytest.mark.django_db(transaction=True)

REFUND_MAIL = {**EMAIL, "subject": "Refund of order 42"}
DEPLOY_TICKET = {"title": "Deploy the cache", "body": "Roll out the Redis cache."}


def _user(name: str) -> Any:
    return get_user_model().objects.get(username=name)


def refund_request(alice: Any, agent: Any, model: Any) -> ApprovalRequest:
    """alice's run asks to mail about a refund (the demo route ``refunds``)."""
    model(Script([tool_call("send_email", REFUND_MAIL), text("sent")]))
    [approval] = pending(ask(alice, agent, "Mail ops about the refund"))
    return approval


def deploy_request(alice: Any, agent: Any, model: Any) -> ApprovalRequest:
    """alice's run reads the notes (untrusted), then asks to open a ticket
    about a deploy: it waits (taint), and the demo route ``deploys`` takes it."""
    model(
        Script(
            [
                tool_call("search_notes", {"keyword": "Redis"}),
                tool_call("create_ticket", DEPLOY_TICKET),
                text("Ticket opened."),
            ]
        )
    )
    [approval] = pending(ask(alice, agent, "Open a ticket to deploy the cache"))
    return approval


def report_request(alice: Any, agent: Any, model: Any) -> ApprovalRequest:
    """A request no demo route matches (the weekly report mail)."""
    model(Script([tool_call("send_email", EMAIL), text("sent")]))
    [approval] = pending(ask(alice, agent, "Mail the report"))
    return approval


def listed(client: Any) -> list[str]:
    response = client.get("/api/approvals/?status=pending")
    assert response.status_code == 200
    return [a["id"] for a in response.json()]


# -- choosing the route --------------------------------------------------------


def test_the_route_is_chosen_at_creation_and_recorded_with_its_reason(
    alice, demo, model, api_client_for
):
    refund = refund_request(alice, demo.agent, model)
    deploy = deploy_request(alice, demo.agent, model)
    report = report_request(alice, demo.agent, model)

    assert refund.route.name == "refunds"
    assert 'contains(subject, "refund") holds' in refund.route_reason
    assert "tool send_email" in refund.route_reason
    assert deploy.route.name == "deploys"
    assert "tool create_ticket" in deploy.route_reason
    assert report.route is None and report.route_reason == ""
    requested = AuditEvent.objects.filter(
        kind=AuditKind.APPROVAL_REQUESTED, object_id=str(refund.pk)
    ).get()
    assert requested.data["route"] == "refunds"

    payload = {
        a["id"]: a for a in api_client_for(demo.operator).get("/api/approvals/").json()
    }
    assert payload[str(refund.pk)]["route"] == "refunds"
    assert payload[str(refund.pk)]["route_reason"] == refund.route_reason
    assert payload[str(refund.pk)]["escalated_at"] is None
    assert payload[str(report.pk)]["route"] is None


def test_the_most_specific_route_wins_then_priority(demo):
    payments = Group.objects.get(name="payments")

    def route(name: str, **fields: Any) -> ApprovalRoute:
        made = ApprovalRoute.objects.create(name=name, **fields)
        made.approver_groups.add(payments)
        return made

    ApprovalRoute.objects.all().delete()
    writes = route("writes", risk="write")
    by_agent = route("assistant", agent=demo.agent)
    route("tickets", tool="create_ticket")
    big = route("big", tool="create_ticket", condition="len(body) > 20")
    call = {
        "tool": "create_ticket",
        "tool_version": 1,
        "agent_id": demo.agent.pk,
        "risk": "write",
    }

    chosen = route_for(**call, arguments={"title": "x", "body": "y" * 30})
    assert chosen is not None and chosen.route == big
    assert "len(body) > 20 holds" in chosen.reason
    assert "the most specific of 4 matching routes" in chosen.reason
    # tool > agent > risk
    chosen = route_for(**call, arguments={"title": "x", "body": "short"})
    assert chosen is not None and chosen.route.name == "tickets"
    chosen = route_for(**{**call, "tool": "other"}, arguments={})
    assert chosen is not None and chosen.route == by_agent
    chosen = route_for(**{**call, "tool": "other", "agent_id": 0}, arguments={})
    assert chosen is not None and chosen.route == writes
    # Equally specific: the higher priority wins.
    urgent = route("urgent writes", risk="write", priority=5)
    chosen = route_for(**{**call, "tool": "other", "agent_id": 0}, arguments={})
    assert chosen is not None and chosen.route == urgent
    # A version pins one version; disabled routes do not match.
    v2 = route("tickets v2", tool="create_ticket", tool_version=2)
    assert route_for(**call, arguments={"body": ""}).route.name == "tickets"
    chosen = route_for(**{**call, "tool_version": 2}, arguments={"body": ""})
    assert chosen is not None and chosen.route == v2
    ApprovalRoute.objects.update(enabled=False)
    assert route_for(**call, arguments={}) is None


def test_a_condition_that_cannot_be_evaluated_routes_to_be_safe(demo):
    ApprovalRoute.objects.all().delete()
    ApprovalRoute.objects.create(
        name="amounts", tool="refund", condition="amount > 1000"
    )
    chosen = route_for(
        tool="refund",
        tool_version=None,
        agent_id=demo.agent.pk,
        risk="write",
        arguments={"amount": "a lot"},
    )
    assert chosen is not None and "could not be evaluated" in chosen.reason
    assert (
        route_for(
            tool="refund",
            tool_version=None,
            agent_id=demo.agent.pk,
            risk="write",
            arguments={"amount": 10},
        )
        is None
    )


# -- who sees, is told and decides ------------------------------------------------


def test_only_a_requests_approvers_list_and_decide_it_auditors_read_all(
    alice, demo, model, api_client_for
):
    fiona, devon = _user("fiona"), _user("devon")
    dave = user_in("approvers", "dave")  # holds the permission, on no route
    refund = refund_request(alice, demo.agent, model)
    deploy = deploy_request(alice, demo.agent, model)
    report = report_request(alice, demo.agent, model)

    assert listed(api_client_for(fiona)) == [str(refund.pk)]
    assert listed(api_client_for(devon)) == [str(deploy.pk)]
    assert listed(api_client_for(dave)) == [str(report.pk)]
    # operator is an auditor too: reads all three.
    assert set(listed(api_client_for(demo.operator))) == {
        str(refund.pk),
        str(deploy.pk),
        str(report.pk),
    }
    assert api_client_for(demo.bob).get("/api/approvals/").status_code == 403

    for outsider in (devon, dave, demo.operator, demo.admin):
        response = post_decision(api_client_for(outsider), refund, decision="approve")
        assert response.status_code == 403, outsider
        assert "routed to other approvers" in response.json()["error"]
    response = post_decision(api_client_for(fiona), report, decision="approve")
    assert response.status_code == 403
    refund.refresh_from_db()
    assert refund.status == "pending" and refund.votes.count() == 0

    response = post_decision(api_client_for(fiona), refund, decision="approve")
    assert response.status_code == 200
    assert response.json()["status"] == "approved"
    response = post_decision(
        api_client_for(devon), deploy, decision="reject", reason="not today"
    )
    assert response.status_code == 200
    assert response.json()["status"] == "rejected"
    assert (
        post_decision(api_client_for(dave), report, decision="approve").json()["status"]
        == "approved"
    )


def test_may_decide_and_approvers_for_agree_for_everyone(alice, demo, model):
    user_in("approvers", "dave")
    away_for_a_day("devon", delegate="bob")
    requests = [
        refund_request(alice, demo.agent, model),
        deploy_request(alice, demo.agent, model),
        report_request(alice, demo.agent, model),
    ]
    everyone = list(get_user_model().objects.all())
    for request in requests:
        deciders = {u.username for u in approvers_for(request)}
        assert deciders == {u.username for u in everyone if may_decide(u, request)}
    assert {u.username for u in approvers_for(requests[0])} == {"fiona"}
    assert {u.username for u in approvers_for(requests[1])} == {"bob"}
    assert {u.username for u in approvers_for(requests[2])} == {
        "admin",
        "operator",
        "dave",
    }


def test_the_queue_page_shows_a_request_to_its_approvers_with_its_route(
    alice, demo, model
):
    refund = refund_request(alice, demo.agent, model)
    deploy = deploy_request(alice, demo.agent, model)

    page = logged_in(_user("fiona")).get("/approvals/").content.decode()
    assert f'id="approval-{refund.pk}"' in page
    assert f'id="approval-{deploy.pk}"' not in page
    assert 'data-route="refunds"' in page
    assert "Route “refunds”: tool send_email" in page
    assert "data-decide-refused" not in page
    assert 'href="/approvals/away/"' in page

    page = logged_in(_user("devon")).get("/approvals/").content.decode()
    assert f'id="approval-{deploy.pk}"' in page
    assert f'id="approval-{refund.pk}"' not in page
    # Not even the tool filter names what is routed to others.
    assert "<option>create_ticket</option>" in page
    assert "<option>send_email</option>" not in page

    # The operator audits: reads both, decides neither (routed to others).
    page = logged_in(demo.operator).get("/approvals/").content.decode()
    assert f'id="approval-{refund.pk}"' in page
    assert f'id="approval-{deploy.pk}"' in page
    assert page.count("data-decide-refused") == 2
    assert "routed to other approvers" in page

    assert logged_in(user_in("approvers", "dave")).get("/approvals/").status_code == 200
    page = logged_in(_user("dave")).get("/approvals/").content.decode()
    assert f'id="approval-{refund.pk}"' not in page
    assert logged_in(demo.bob).get("/approvals/").status_code == 403


async def test_the_live_queue_sends_a_request_only_to_its_approvers(alice, demo, model):
    fiona = await database_sync_to_async(_user)("fiona")
    devon = await database_sync_to_async(_user)("devon")
    fionas, devons = queue_socket(fiona), queue_socket(devon)
    assert (await fionas.connect())[0] and (await devons.connect())[0]

    refund = await database_sync_to_async(refund_request)(alice, demo.agent, model)
    deploy = await database_sync_to_async(deploy_request)(alice, demo.agent, model)

    def is_approval(frame: dict[str, Any]) -> bool:
        return frame["type"] == "approval"

    first = await next_frame(fionas, is_approval)
    assert first["approval"]["id"] == str(refund.pk)
    assert first["approval"]["route"] == "refunds"
    assert 'data-route="refunds"' in first["html"]
    # devon's first card is the deploy: the refund never reached him.
    first = await next_frame(devons, is_approval)
    assert first["approval"]["id"] == str(deploy.pk)
    # And fiona's next is her own decision, not devon's request.
    await database_sync_to_async(approval_decide)(
        approval=deploy, user=devon, decision="reject", reason="no"
    )
    await database_sync_to_async(approval_decide)(
        approval=refund, user=fiona, decision="approve"
    )
    after = await next_frame(fionas, is_approval)
    assert after["approval"]["id"] == str(refund.pk)
    assert after["approval"]["status"] == "approved"
    await fionas.disconnect()
    await devons.disconnect()


def test_only_the_routes_approvers_are_mailed(alice, demo, model, settings):
    settings.REACH_APPROVAL_EMAILS = True
    refund_request(alice, demo.agent, model)
    assert [o.to for o in Outbox.objects.all()] == ["fiona@example.com"]
    Outbox.objects.all().delete()
    report_request(alice, demo.agent, model)
    assert sorted(o.to for o in Outbox.objects.all()) == [
        "admin@example.com",
        "operator@example.com",
    ]


def test_a_routes_notify_targets_hear_of_its_requests_only(alice, demo, model):
    everyone = NotifyTarget.objects.create(
        name="all", kind=NotifyTarget.Kind.SLACK_CHANNEL, slack_channel="CALL"
    )
    finance = NotifyTarget.objects.create(
        name="finance",
        kind=NotifyTarget.Kind.SLACK_CHANNEL,
        slack_channel="CFIN",
        for_all=False,
    )
    finance.routes.add(ApprovalRoute.objects.get(name="refunds"))

    refund = refund_request(alice, demo.agent, model)
    report = report_request(alice, demo.agent, model)

    def told(approval: ApprovalRequest) -> set[str]:
        return {
            d.target.name
            for d in Delivery.objects.filter(approval_id=str(approval.pk))
            if d.target
        }

    assert told(refund) == {"all", "finance"}
    assert told(report) == {"all"}
    assert everyone.deliveries.count() == 2
    # A webhook's body names the route and the route's approvers.
    sent = event_payload(refund)["approval"]
    assert (sent["route"], sent["approvers"]) == ("refunds", ["fiona"])
    assert event_payload(report)["approval"]["route"] is None


# -- escalation ---------------------------------------------------------------------


def test_an_unanswered_request_escalates_once_after_the_routes_minutes(
    alice, demo, model, settings, api_client_for
):
    settings.REACH_APPROVAL_EMAILS = True
    dave = user_in("approvers", "dave", email="dave@example.com")
    refund = refund_request(alice, demo.agent, model)
    assert refund.route.escalate_after_minutes == 30
    assert not may_decide(dave, refund)
    assert listed(api_client_for(dave)) == []

    assert approvals_escalate(now=timezone.now() + timedelta(minutes=29)) == 0
    later = timezone.now() + timedelta(minutes=31)
    assert approvals_escalate(now=later) == 1
    assert approvals_escalate(now=later + timedelta(minutes=5)) == 0

    refund.refresh_from_db()
    assert refund.escalated_at == later
    # The approvers group joins: operator and dave (and fiona stays).
    assert {u.username for u in approvers_for(refund)} == {"fiona", "operator", "dave"}
    assert may_decide(dave, refund)
    assert listed(api_client_for(dave)) == [str(refund.pk)]
    # Told once each: fiona at creation, the others at the escalation.
    assert sorted(o.to for o in Outbox.objects.all()) == [
        "dave@example.com",
        "fiona@example.com",
        "operator@example.com",
    ]
    escalated = AuditEvent.objects.get(kind=AuditKind.APPROVAL_ESCALATED)
    assert escalated.object_id == str(refund.pk)
    assert escalated.data["route"] == "refunds"
    page = logged_in(dave).get("/approvals/").content.decode()
    assert "data-escalated" in page

    response = post_decision(api_client_for(dave), refund, decision="approve")
    assert response.status_code == 200


def test_the_beat_schedules_the_escalation():
    from celery import Celery

    from approvals.tasks import escalate
    from reach_site.schedule import add_schedule

    app = Celery("probe", set_as_current=False)
    add_schedule(app, reaper_interval_s=5.0)
    app.finalize()
    entry = app.conf.beat_schedule["escalate approvals"]
    assert entry["task"] == escalate.name == "approvals.escalate"


# -- out of office ------------------------------------------------------------------


def away_for_a_day(username: str, delegate: str | None = None) -> ApproverAway:
    from approvals.services import approver_away_set

    return approver_away_set(
        user=_user(username),
        ends_at=timezone.now() + timedelta(days=1),
        delegate=_user(delegate) if delegate else None,
    )


def test_an_approver_marks_themselves_away_and_their_delegate_decides(
    alice, demo, model, settings, api_client_for
):
    settings.REACH_APPROVAL_EMAILS = True
    fiona = _user("fiona")
    carol = user_in("auditors", "carol", email="carol@example.com")
    page = logged_in(fiona)
    assert page.get("/approvals/away/").status_code == 200
    until = (timezone.localtime() + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    response = page.post(
        "/approvals/away/", {"ends_at": until, "delegate": "carol", "note": "leave"}
    )
    assert response.status_code == 302
    away = ApproverAway.objects.get(user=fiona)
    assert away.delegate == carol
    recorded = AuditEvent.objects.get(kind=AuditKind.APPROVER_AWAY_SET)
    assert recorded.data["delegate"] == "carol" and recorded.actor == "fiona"

    refund = refund_request(alice, demo.agent, model)
    # Not asked, not told: the delegate is.
    assert [u.username for u in approvers_for(refund)] == ["carol"]
    assert [o.to for o in Outbox.objects.all()] == ["carol@example.com"]
    response = post_decision(api_client_for(fiona), refund, decision="approve")
    assert response.status_code == 403
    assert "away" in response.json()["error"]
    # fiona still sees it, with her buttons off and the way back.
    queue = logged_in(fiona).get("/approvals/").content.decode()
    assert f'id="approval-{refund.pk}"' in queue
    assert "You are marked away until" in queue

    # carol, an auditor, is an approver while fiona is away.
    assert listed(api_client_for(carol)) == [str(refund.pk)]
    response = post_decision(api_client_for(carol), refund, decision="approve")
    assert response.status_code == 200

    # Back early: the delegate decides nothing more, fiona decides again.
    assert page.post("/approvals/away/", {"end": away.pk}).status_code == 302
    assert AuditEvent.objects.filter(kind=AuditKind.APPROVER_AWAY_ENDED).count() == 1
    second = refund_request(alice, demo.agent, model)
    assert [u.username for u in approvers_for(second)] == ["fiona"]
    assert not may_decide(carol, second)


def test_an_away_approver_without_a_delegate_is_skipped_for_unrouted_requests(
    alice, demo, model
):
    away_for_a_day("operator")
    report = report_request(alice, demo.agent, model)
    assert [u.username for u in approvers_for(report)] == ["admin"]
    assert not may_decide(demo.operator, report)
    assert may_decide(demo.admin, report)


def test_an_away_period_must_end_after_it_starts_and_not_delegate_to_oneself(demo):
    page = logged_in(_user("fiona"))
    past = (timezone.localtime() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    response = page.post("/approvals/away/", {"ends_at": past})
    assert response.status_code == 200
    assert "after its start" in response.content.decode()
    assert not ApproverAway.objects.exists()
    assert logged_in(demo.bob).get("/approvals/away/").status_code == 403


# -- no route, and the admin ----------------------------------------------------------


def test_without_routes_nothing_changes(alice, demo, model, api_client_for):
    ApprovalRoute.objects.all().delete()
    dave = user_in("approvers", "dave")
    refund = refund_request(alice, demo.agent, model)
    assert refund.route is None
    assert {u.username for u in approvers_for(refund)} == {"admin", "operator", "dave"}
    assert api_client_for(_user("fiona")).get("/api/approvals/").status_code == 403
    assert listed(api_client_for(dave)) == [str(refund.pk)]
    assert (
        post_decision(api_client_for(dave), refund, decision="approve").json()["status"]
        == "approved"
    )


def test_a_routes_number_of_approvals_applies(alice, demo, model, api_client_for):
    route = ApprovalRoute.objects.get(name="refunds")
    route.approvals_required = 2
    route.save()
    payments = Group.objects.get(name="payments")
    frank = user_in("auditors", "frank")
    frank.groups.add(payments)
    refund = refund_request(alice, demo.agent, model)
    assert refund.approvals_required == 2
    first = post_decision(api_client_for(_user("fiona")), refund, decision="approve")
    assert first.json()["status"] == "pending"
    second = post_decision(api_client_for(frank), refund, decision="approve")
    assert second.json()["status"] == "approved"
    assert sorted(second.json()["approved_by"]) == ["fiona", "frank"]


def test_the_admin_saves_a_route_audited_and_refuses_a_broken_condition(demo):
    admin = logged_in(demo.admin)
    payments = Group.objects.get(name="payments")
    form = {
        "name": "big refunds",
        "enabled": "on",
        "priority": "0",
        "tool": "send_email",
        "condition": "amount >",
        "approver_groups": [str(payments.pk)],
        "approvals_required": "2",
    }
    response = admin.post("/admin/approvals/approvalroute/add/", form)
    assert response.status_code == 200
    assert not ApprovalRoute.objects.filter(name="big refunds").exists()

    response = admin.post(
        "/admin/approvals/approvalroute/add/", {**form, "condition": "amount > 1000"}
    )
    assert response.status_code == 302
    route = ApprovalRoute.objects.get(name="big refunds")
    changed = AuditEvent.objects.get(kind=AuditKind.APPROVAL_ROUTE_CHANGED)
    assert changed.object_id == str(route.pk)
    assert changed.data["approver_groups"] == ["payments"]
    assert changed.data["condition"] == "amount > 1000"
    assert changed.actor == "admin"


def test_the_demo_route_users_sign_in_with_the_cast_password(demo):
    client = logged_in(_user("fiona"))
    assert client.get("/approvals/").status_code == 200
    assert _user("fiona").check_password(PASSWORD)


def test_a_delegate_hears_of_what_already_waits_when_the_approver_leaves(
    alice, demo, model, settings
):
    settings.REACH_APPROVAL_EMAILS = True
    carol = user_in("auditors", "carol", email="carol@example.com")
    refund = refund_request(alice, demo.agent, model)
    report_request(alice, demo.agent, model)  # not fiona's: carol is not told
    Outbox.objects.all().delete()

    away_for_a_day("fiona", delegate="carol")

    assert [o.to for o in Outbox.objects.all()] == ["carol@example.com"]
    assert str(refund.pk) in Outbox.objects.get().idempotency_key
    assert may_decide(carol, refund)
