"""The queue page and the history, rendered by the server for approvers."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from tests.support.cast import EMAIL, EMAIL_PREVIEW, TICKET
from tests.support.clients import logged_in
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask, pending, user_in

pytestmark = pytest.mark.django_db(transaction=True)


def card_ids(page: str) -> list[str]:
    return re.findall(
        r'<section class="card approval-card[^"]*" id="approval-([^"]+)"', page
    )


def card(page: str, approval: ApprovalRequest) -> str:
    start = page.index(f'id="approval-{approval.pk}"')
    return page[start : page.index("</section>", start)]


@pytest.fixture
def queue(alice, bob, operator, demo, model) -> dict[str, ApprovalRequest]:
    """An email of alice (oldest), a tainted ticket of bob, a rejected email."""
    model(
        Script(
            [
                tool_call("send_email", EMAIL),
                tool_call("search_notes", {"keyword": "Redis"}),
                tool_call("create_ticket", TICKET),
                tool_call("send_email", {**EMAIL, "subject": "old news"}),
            ]
        )
    )
    [email] = pending(ask(alice, demo.agent, "Mail the report to ops"))
    [ticket] = pending(ask(bob, demo.agent, "Make a ticket about the Redis note"))
    [decided] = pending(ask(alice, demo.agent, "Mail the old news"))
    # Requested in this order, a second apart.
    now = timezone.now()
    for offset, approval in enumerate((email, ticket, decided)):
        ApprovalRequest.objects.filter(pk=approval.pk).update(
            requested_at=now - timedelta(seconds=30 - offset)
        )
    approval_decide(approval=decided, user=operator, decision="reject", reason="stale")
    return {"email": email, "ticket": ticket, "decided": decided}


def test_the_queue_shows_pending_requests_oldest_first_and_decided_ones_below(
    queue, operator
):
    page = logged_in(operator).get("/approvals/").content.decode()

    assert card_ids(page) == [str(queue["email"].pk), str(queue["ticket"].pk)]
    recent = page[page.index('id="recent-decisions"') :]
    assert "Send email to ops@example.com — subject: old news" in html.unescape(recent)
    assert "stale" in recent


def test_a_card_shows_what_an_approver_needs_to_decide(queue, operator):
    page = logged_in(operator).get("/approvals/").content.decode()
    email = html.unescape(card(page, queue["email"]))

    assert '<code class="tool">send_email</code>' in email
    assert 'class="badge risk-irreversible"' in email
    assert EMAIL_PREVIEW in email
    assert '"to": "ops@example.com"' in email  # the arguments as JSON
    assert "<strong data-owner>alice</strong>" in email
    assert "Mail the report to ops" in email  # what the user asked
    assert f'href="/traces/{queue["email"].task_id}/"' in email
    assert "asked <time data-age" in email and "expires in 59 min" in email
    for label in ("Approve", "Edit &amp; approve", "Reject"):
        assert f">{html.unescape(label)}</button>" in email
    assert 'placeholder="Reason (required to reject' in email
    # The tool's schema rides along for the editor's check.
    schema = re.search(r'<script type="application/json">(.*?)</script>', email, re.S)
    assert schema and '"required": ["to", "subject", "body"]' in schema.group(1)

    ticket = html.unescape(card(page, queue["ticket"]))
    assert "risk-write" in ticket
    assert "Tainted by" in ticket and "search_notes#2" in ticket
    assert "<strong data-owner>bob</strong>" in ticket


def test_an_approver_who_cannot_read_traces_sees_the_owner_but_no_trace_link(
    queue,
):
    dave = user_in("approvers", "dave")
    page = logged_in(dave).get("/approvals/").content.decode()
    email = card(page, queue["email"])
    assert "<strong data-owner>alice</strong>" in email
    assert 'data-trace-link class="hidden"' in email
    assert f'href="/c/{queue["email"].task.conversation_id}/"' not in page


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("tool=send_email", ["email"]),
        ("tool=create_ticket", ["ticket"]),
        ("risk=irreversible", ["email"]),
        ("risk=write", ["ticket"]),
        ("agent=assistant", ["email", "ticket"]),
        ("agent=nobody", []),
        ("user=bob", ["ticket"]),
        ("user=alice", ["email"]),
        ("tainted=yes", ["ticket"]),
        ("tainted=no", ["email"]),
        ("tool=send_email&tainted=yes", []),
    ],
)
def test_the_queue_filters(queue, operator, query, expected):
    page = logged_in(operator).get(f"/approvals/?{query}").content.decode()
    assert card_ids(page) == [str(queue[name].pk) for name in expected]


def test_the_history_shows_who_when_why_and_the_edit(queue, operator, demo):
    approval_decide(
        approval=queue["email"],
        user=operator,
        decision="approve",
        arguments={**EMAIL, "to": "team@example.com"},
    )
    approval_decide(
        approval=queue["ticket"], user=demo.admin, decision="reject", reason="no"
    )
    page = logged_in(operator).get("/approvals/history/").content.decode()
    rows = re.findall(r'<tr data-approval="([^"]+)" data-status="(\w+)"', page)
    assert rows == [
        (str(queue["ticket"].pk), "rejected"),
        (str(queue["email"].pk), "approved"),
        (str(queue["decided"].pk), "rejected"),
    ]
    approved = page[page.index(f'<tr data-approval="{queue["email"].pk}"') :]
    approved = html.unescape(approved[: approved.index("</tr>")])
    assert "<td data-decided-by>operator</td>" in approved
    assert '<del>"ops@example.com"</del> → <ins>"team@example.com"</ins>' in approved
    assert timezone.now().strftime("%Y-%m-%d") in approved
    rejected = page[page.index(f'<tr data-approval="{queue["ticket"].pk}"') :]
    rejected = rejected[: rejected.index("</tr>")]
    assert "<td data-decided-by>admin</td>" in rejected
    assert "<td data-reason>no</td>" in rejected

    only = logged_in(operator).get("/approvals/history/?status=rejected")
    assert str(queue["email"].pk) not in only.content.decode()


def test_an_expired_request_is_in_the_history_as_expired_not_rejected(queue, operator):
    from approvals.services import approvals_expire

    ApprovalRequest.objects.filter(pk=queue["email"].pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert approvals_expire() == 1
    page = logged_in(operator).get("/approvals/history/").content.decode()
    row = page[page.index(f'<tr data-approval="{queue["email"].pk}"') :]
    row = row[: row.index("</tr>")]
    assert 'data-status="expired"' in row
    assert "nobody decided" in row
    assert "rejected" not in row


def test_model_and_user_text_on_a_card_is_escaped(alice, operator, demo, model):
    hostile = {**EMAIL, "subject": "<script>alert(1)</script>"}
    model(Script([tool_call("send_email", hostile), text("ok")]))
    [approval] = pending(ask(alice, demo.agent, "<img src=x onerror=alert(2)>"))
    page = logged_in(operator).get("/approvals/").content.decode()
    body = card(page, approval)
    assert "<script>alert(1)" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<img src=x" not in body
