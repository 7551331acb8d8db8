"""Issue 27, item 3: the approval mail that decides.

Each approver's mail holds what the card shows and two signed links of their own;
a link opens a confirmation page (GET decides nothing) whose form decides, once,
as the approver it was made for, while the request stands as it was mailed.
"""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core import signing
from django.utils import timezone

from approvals import links
from approvals.models import ApprovalLinkUse, ApprovalRequest
from approvals.services import DecisionError, approval_decide, approval_decide_by_link
from audit.models import AuditEvent
from effects.models import Outbox
from runs.models import Task
from runs.templatetags.reach import json_pretty
from tests.support.cast import EDITED_EMAIL, EMAIL, EMAIL_PREVIEW
from tests.support.clients import logged_in
from tests.support.racing import at_once
from tests.support.replies import Script, text, tool_call
from tests.support.runs import ask, pending

pytestmark = pytest.mark.django_db(transaction=True)

CANARY_KEY = "sk-canaryMAILLINK0123456789abcdef"
#: The cast's email, with a credential in its body that the redactor scrubs.
SECRET_EMAIL = {**EMAIL, "body": f"The weekly report. Use key {CANARY_KEY}."}
LINK = re.compile(r"^(https?://\S+/approvals/\S+/confirm/\?t=\S+)$", re.M)


@pytest.fixture
def mailed(alice, operator, demo, model, settings) -> ApprovalRequest:
    """Alice's email waits for approval; the approvers' notices are queued."""
    settings.REACH_APPROVAL_EMAILS = True
    settings.REACH_PUBLIC_URL = "https://reach.example.com/"
    model(Script([tool_call("send_email", SECRET_EMAIL), text("sent")]))
    [approval] = pending(ask(alice, demo.agent, "Mail the report to ops"))
    return approval


def notice(user: Any) -> Outbox:
    return Outbox.objects.get(to=user.email)


def mailed_links(user: Any) -> dict[str, str]:
    """The approve and reject links of ``user``'s notice, as paths with the token."""
    found = LINK.findall(notice(user).body)
    assert len(found) == 2, notice(user).body
    paths = {}
    for url in found:
        parts = urlsplit(url)
        assert f"{parts.scheme}://{parts.netloc}" == "https://reach.example.com"
        token = parse_qs(parts.query)["t"][0]
        decision = links.read_token(token).decision.value
        paths[decision] = f"{parts.path}?{parts.query}"
    return paths


def token_of(path: str) -> str:
    return parse_qs(urlsplit(path).query)["t"][0]


def post(client: Any, path: str, **form: str) -> Any:
    """Submit the confirmation form of the link at ``path``."""
    return client.post(urlsplit(path).path, {"t": token_of(path), **form})


def refusal(response: Any) -> str:
    match = re.search(r'data-refused="([^"]+)"', response.content.decode())
    assert match, response.content.decode()
    return match.group(1)


def fresh(approval: ApprovalRequest) -> ApprovalRequest:
    return ApprovalRequest.objects.get(pk=approval.pk)


# The mail


def test_each_approver_gets_the_card_in_the_mail_with_links_of_their_own(
    mailed, operator, admin_user
):
    body = notice(operator).body

    assert EMAIL_PREVIEW in body
    assert "alice's agent wants to run send_email (irreversible)" in body
    assert "Why it waits: " + "; ".join(mailed.reasons) in body
    # The arguments as the card shows them: the stored, redacted object, pretty
    # (the key order may differ: PostgreSQL's jsonb orders the stored copy).
    block = re.search(r"^Arguments:\n(\{\n.*?\n\})$", body, re.S | re.M)
    assert block and block.group(1) == json_pretty(json.loads(block.group(1)))
    assert json.loads(block.group(1)) == mailed.arguments
    assert CANARY_KEY not in body
    assert "[REDACTED:api_key]" in body
    card = logged_in(operator).get("/approvals/").content.decode()
    shown = re.search(r"<pre class=\"args\"[^>]*>(.*?)</pre>", card, re.S)
    assert shown and json.loads(html.unescape(shown.group(1))) == mailed.arguments

    mine, theirs = mailed_links(operator), mailed_links(admin_user)
    assert set(mine) == {"approve", "reject"}
    assert set(mine.values()).isdisjoint(theirs.values())
    link = links.read_token(token_of(mine["approve"]))
    assert link.user_id == operator.pk
    assert link.approval_id == str(mailed.pk)
    assert link.arguments_hash == mailed.arguments_hash
    assert link.expires <= mailed.expires_at.timestamp()
    assert "https://reach.example.com/approvals/" in body


def test_no_mail_no_links_when_approval_emails_are_off(alice, demo, model):
    model(Script([tool_call("send_email", EMAIL), text("sent")]))
    [approval] = pending(ask(alice, demo.agent, "Mail the report to ops"))
    assert Outbox.objects.count() == 0
    assert approval.status == "pending"


# Opening a link


def test_opening_a_link_shows_the_request_and_decides_nothing(mailed, operator):
    page = logged_in(operator).get(mailed_links(operator)["approve"])

    assert page.status_code == 200
    text_ = html.unescape(page.content.decode())
    assert EMAIL_PREVIEW in text_
    shown = re.search(r"<pre class=\"args\"[^>]*>(.*?)</pre>", text_, re.S)
    assert shown and json.loads(shown.group(1)) == mailed.arguments
    assert "; ".join(mailed.reasons) in text_
    assert 'class="badge risk-irreversible"' in text_
    assert re.search(r'<button class="primary" type="submit">Approve</button>', text_)
    assert 'name="csrfmiddlewaretoken"' in text_
    assert 'name="reason"' not in text_
    assert page["Cache-Control"].startswith("max-age=0")
    # GET (a mail scanner, a preview pane) never decides, nor uses the link up.
    assert fresh(mailed).status == "pending"
    assert not ApprovalLinkUse.objects.exists()
    assert Task.objects.get().status == "waiting_approval"


def test_signed_out_the_link_leads_to_the_login_and_back(mailed, operator, client):
    path = mailed_links(operator)["approve"]
    page = client.get(path)

    assert page.status_code == 302
    login = urlsplit(page["Location"])
    assert login.path == "/accounts/login/"
    assert parse_qs(login.query)["next"] == [path]
    assert fresh(mailed).status == "pending"


def test_a_link_opened_by_another_approver_is_refused_and_decides_nothing(
    mailed, operator, admin_user
):
    path = mailed_links(operator)["approve"]
    elsewhere = logged_in(admin_user)

    for response in (elsewhere.get(path), post(elsewhere, path)):
        assert response.status_code == 403
        assert refusal(response) == "other_user"
        assert "mailed to another approver" in response.content.decode()
        assert EMAIL_PREVIEW not in html.unescape(response.content.decode())
    assert fresh(mailed).status == "pending"
    assert not ApprovalLinkUse.objects.exists()


def test_a_chat_user_holding_a_link_is_refused(mailed, operator, bob):
    response = post(logged_in(bob), mailed_links(operator)["approve"])
    assert response.status_code == 403
    assert refusal(response) == "other_user"
    assert fresh(mailed).status == "pending"


def test_a_forged_or_damaged_link_is_refused(mailed, operator):
    client = logged_in(operator)
    base = f"/approvals/{mailed.pk}/confirm/"
    good = token_of(mailed_links(operator)["approve"])
    # Tampered: the reject link's payload under the approve link's signature.
    forged_payload = signing.dumps(
        {
            "a": str(mailed.pk),
            "u": operator.pk,
            "h": mailed.arguments_hash,
            "d": "approve",
            "e": int(mailed.expires_at.timestamp()),
        },
        salt="some.other.salt",
    )
    for token in ("", "garbage", good[:-3] + "abc", forged_payload):
        for response in (
            client.get(f"{base}?t={token}"),
            client.post(base, {"t": token}),
        ):
            assert response.status_code == 400, token
            assert refusal(response) == "forged"
    # A good link of one request does not decide another.
    other = f"/approvals/{ApprovalRequest().id}/confirm/?t={good}"
    assert client.get(other).status_code == 400
    assert fresh(mailed).status == "pending"


# Deciding through a link


def test_the_approve_link_decides_through_the_queues_service(mailed, operator):
    client = logged_in(operator, enforce_csrf_checks=True)
    path = mailed_links(operator)["approve"]
    page = client.get(path)
    csrf = re.search(
        r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()
    )
    assert csrf

    # CSRF stays on: a post without the form's token decides nothing.
    assert post(client, path).status_code == 403
    assert fresh(mailed).status == "pending"

    done = post(client, path, csrfmiddlewaretoken=csrf.group(1))

    assert done.status_code == 200
    assert "data-done" in done.content.decode()
    decided = fresh(mailed)
    assert (decided.status, decided.decision) == ("approved", "approve")
    assert decided.decided_by == operator
    use = ApprovalLinkUse.objects.get()
    assert (use.user, use.decision, use.approval_id) == (operator, "approve", mailed.pk)
    assert use.token_digest == links.token_digest(token_of(path))
    assert token_of(path) not in str(list(ApprovalLinkUse.objects.values()))
    # The same audit as the queue's decision.
    assert AuditEvent.objects.filter(
        kind="approval.decided", object_id=str(mailed.pk), actor=operator.username
    ).exists()


def test_a_used_link_is_refused_and_says_who_decided_and_when(mailed, operator):
    client = logged_in(operator)
    path = mailed_links(operator)["approve"]
    assert post(client, path).status_code == 200

    for replay in (client.get(path), post(client, path)):
        assert replay.status_code == 409
        assert refusal(replay) == "decided"
        shown = html.unescape(replay.content.decode())
        assert "Approved by <strong data-decided-by>operator</strong>" in shown
        assert fresh(mailed).decided_at.strftime("%Y-%m-%d %H:%M") in shown
    assert ApprovalLinkUse.objects.count() == 1


def test_a_used_link_of_a_request_still_pending_is_refused(mailed, operator):
    """Two approvers required: the first one's link votes, and votes once."""
    ApprovalRequest.objects.filter(pk=mailed.pk).update(approvals_required=2)
    client = logged_in(operator)
    path = mailed_links(operator)["approve"]

    first = post(client, path)
    assert first.status_code == 200
    assert "1 of 2 approvers" in first.content.decode()
    assert fresh(mailed).status == "pending"

    again = post(client, path)
    assert again.status_code == 409
    assert refusal(again) == "used"
    assert refusal(client.get(path)) == "used"
    assert fresh(mailed).votes.count() == 1


def test_the_reject_link_needs_a_reason_and_hands_it_to_the_service(mailed, operator):
    client = logged_in(operator)
    path = mailed_links(operator)["reject"]
    page = client.get(path).content.decode()
    assert re.search(r'<textarea id="reason" name="reason"[^>]* required', page)
    assert '<button class="danger" type="submit">Reject</button>' in page

    refused = post(client, path, reason="   ")
    assert refused.status_code == 400
    assert "A reason is required to reject." in refused.content.decode()
    # A refused post leaves the link unused and the request pending.
    assert fresh(mailed).status == "pending"
    assert not ApprovalLinkUse.objects.exists()

    done = post(client, path, reason="not this week")
    assert done.status_code == 200
    decided = fresh(mailed)
    assert (decided.status, decided.reason) == ("rejected", "not this week")
    assert "“not this week”" in done.content.decode()


def test_the_form_cannot_turn_a_reject_link_into_an_approval(mailed, operator):
    post(logged_in(operator), mailed_links(operator)["reject"], decision="approve")
    assert fresh(mailed).status == "pending"


def test_a_link_dies_when_the_request_is_decided_in_the_queue(
    mailed, operator, admin_user
):
    approval_decide(approval=mailed, user=admin_user, decision="approve")
    client = logged_in(operator)
    path = mailed_links(operator)["reject"]

    for response in (client.get(path), post(client, path, reason="too late")):
        assert response.status_code == 409
        assert refusal(response) == "decided"
        assert "Approved by <strong data-decided-by>admin</strong>" in (
            response.content.decode()
        )
    assert fresh(mailed).status == "approved"
    assert not ApprovalLinkUse.objects.exists()


def test_a_link_dies_when_the_request_is_edited(mailed, operator, admin_user):
    """An edit changes the arguments' hash: a link bound to the old one is stale."""
    ApprovalRequest.objects.filter(pk=mailed.pk).update(approvals_required=2)
    approval_decide(
        approval=mailed, user=admin_user, decision="approve", arguments=EDITED_EMAIL
    )
    assert fresh(mailed).arguments_hash != mailed.arguments_hash
    client = logged_in(operator)
    path = mailed_links(operator)["approve"]

    for response in (client.get(path), post(client, path)):
        assert response.status_code == 409
        assert refusal(response) == "stale"
    assert fresh(mailed).status == "pending"
    assert fresh(mailed).votes.count() == 1


def test_a_link_dies_when_the_request_expires(mailed, operator):
    client = logged_in(operator)
    path = mailed_links(operator)["approve"]
    # Past its expiry, before beat marked it so ...
    ApprovalRequest.objects.filter(pk=mailed.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    response = post(client, path)
    assert response.status_code == 409
    assert refusal(response) == "expired"
    # ... and after.
    ApprovalRequest.objects.filter(pk=mailed.pk).update(status="expired")
    assert refusal(client.get(path)) == "expired"
    assert not ApprovalLinkUse.objects.exists()


def test_a_link_expires_with_the_request_it_was_made_for(mailed, operator):
    """A request given longer after the mail keeps its links to the old expiry."""
    path = mailed_links(operator)["approve"]
    ApprovalRequest.objects.filter(pk=mailed.pk).update(
        expires_at=mailed.expires_at + timedelta(hours=1)
    )
    client = logged_in(operator)
    assert client.get(path).status_code == 200
    # The same link, as it reads once its own expiry is past (signed here: a
    # token's expiry cannot be changed without its signature).
    payload = signing.loads(token_of(path), salt=links.SALT)
    past = signing.dumps(
        {**payload, "e": int(timezone.now().timestamp()) - 1}, salt=links.SALT
    )

    late = client.get(f"/approvals/{mailed.pk}/confirm/?t={past}")
    assert late.status_code == 409
    assert refusal(late) == "expired"
    assert "This link has expired." in late.content.decode()
    assert post(client, f"/approvals/{mailed.pk}/confirm/?t={past}").status_code == 409
    assert fresh(mailed).status == "pending"


def test_a_link_dies_when_the_run_is_cancelled(mailed, operator, alice):
    from runs.services import task_cancel

    task_cancel(task=mailed.task, user=alice)
    response = logged_in(operator).get(mailed_links(operator)["approve"])
    assert response.status_code == 409
    assert refusal(response) == "cancelled"
    assert "withdrawn" in response.content.decode()


def test_the_second_factor_rule_holds_for_links(mailed, operator, settings):
    settings.REACH_REQUIRE_2FA = ["approvers"]
    client = logged_in(operator)
    path = mailed_links(operator)["approve"]

    page = client.get(path).content.decode()
    assert "data-decide-refused" in page
    assert re.search(r'<button class="primary" type="submit" disabled>', page)

    response = post(client, path)
    assert response.status_code == 403
    assert fresh(mailed).status == "pending"
    # The link was not used up: it works once the approver has a second factor.
    assert not ApprovalLinkUse.objects.exists()


def test_a_link_of_a_user_who_is_no_longer_an_approver_is_refused(mailed, operator):
    from django.contrib.auth.models import Group

    path = mailed_links(operator)["approve"]
    operator.groups.set(Group.objects.none())
    operator.user_permissions.clear()
    response = post(logged_in(type(operator).objects.get(pk=operator.pk)), path)
    assert response.status_code == 403
    assert refusal(response) == "not_allowed"
    assert fresh(mailed).status == "pending"


def test_tokens_refuse_other_decisions_and_other_salts(mailed, operator):
    token = links.make_token(mailed, operator, "approve")
    assert links.read_token(token).decision == "approve"
    with pytest.raises(ValueError):
        links.make_token(mailed, operator, "edit")
    payload = signing.loads(token, salt=links.SALT)
    for bad in ({**payload, "d": "mark_done"}, {**payload, "u": "x"}, {"a": 1}):
        with pytest.raises(links.LinkRefused) as refused:
            links.read_token(signing.dumps(bad, salt=links.SALT))
        assert refused.value.reason == "forged"


@pytest.mark.dbsensitive
@pytest.mark.parametrize("required", [1, 2])
def test_one_link_posted_many_times_at_once_decides_once(mailed, operator, required):
    """Five posts of one link race: one vote, one use, the rest refused."""
    ApprovalRequest.objects.filter(pk=mailed.pk).update(approvals_required=required)
    token = token_of(mailed_links(operator)["approve"])

    def decide() -> Any:
        return approval_decide_by_link(
            token=token, approval_id=mailed.pk, user=operator
        )

    results = at_once([decide] * 5)

    won = [r for r in results if isinstance(r, ApprovalRequest)]
    refused = [r for r in results if isinstance(r, (links.LinkRefused, DecisionError))]
    assert len(won) == 1, results
    assert len(refused) == 4, results
    assert ApprovalLinkUse.objects.count() == 1
    assert fresh(mailed).votes.count() == 1
    assert fresh(mailed).status == ("approved" if required == 1 else "pending")
