"""Issue 4 in a real Chromium: alice asks for an email, the operator approves it.

Two browser contexts (two people): alice's chat and the operator's queue page,
both live over their websockets; nobody reloads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from playwright.sync_api import expect

from approvals.models import ApprovalRequest
from effects.models import Outbox
from runs.models import Task
from tests.support import cast
from tests.support.browser import TIMEOUT_MS, log_in
from tests.support.replies import AnyReply, RecordingHandler, text, tool_call
from tests.support.scripted_model import last_user_index, messages_of, tool_messages
from tests.support.stack import Stack

pytestmark = [pytest.mark.browser, pytest.mark.integration]

#: The cast's email (``EMAIL_PREVIEW`` shows it) with a body of its own.
EMAIL = {
    **cast.EMAIL,
    "body": "Hello ops, the weekly report is attached in the tracker.",
}
ANSWER_SENT = "Done: the report went to {to}."
ANSWER_NOT_SENT = "I did not send it: {error}"


class EmailScript(RecordingHandler):
    """Calls ``send_email`` for the user's message, then answers after the result."""

    def respond(self, request: dict[str, Any]) -> AnyReply:
        messages = messages_of(request)
        start = last_user_index(messages) or 0
        results = [m for m in messages[start:] if m.get("role") == "tool"]
        if not results:
            return tool_call("send_email", EMAIL)
        outcome = json.loads(results[-1]["content"])
        if "error" in outcome:
            return text(ANSWER_NOT_SENT.format(error=outcome["error"]))
        return text(ANSWER_SENT.format(to=outcome.get("to", EMAIL["to"])))


def kv(step: Any, key: str) -> Any:
    """The ``key: value`` row of a rendered step."""
    return step.locator(".kv").filter(has=step.page.get_by_text(key, exact=True))


def ask_for_the_email(page: Any) -> Any:
    page.fill("#message", "Please email the weekly report to ops.")
    page.press("#message", "Enter")
    waiting = page.locator("li.step[data-tool='send_email']")
    expect(waiting).to_have_attribute("data-status", "waiting_approval")
    expect(waiting.locator(".approval-wait")).to_contain_text("waiting for approval")
    expect(waiting.locator(".approval-wait")).to_contain_text(cast.EMAIL_PREVIEW)
    expect(page.locator("[data-task-status]").first).to_have_text("waiting_approval")
    return waiting


def test_the_operator_approves_alices_email_and_her_chat_shows_the_result_live(
    browser, stack: Stack, served, tmp_path: Path
):
    served(EmailScript())
    operator = log_in(browser, stack, "operator")
    operator.goto("/approvals/")
    expect(operator.locator("#queue-empty")).to_be_visible()
    alice = log_in(browser, stack, "alice")

    email_step = ask_for_the_email(alice)
    alice.screenshot(path="/tmp/reach-approvals-waiting.png", full_page=True)

    # The card arrives on the operator's open page, without a reload.
    card = operator.locator(".approval-card")
    expect(card).to_have_count(1)
    expect(card.locator("[data-preview]")).to_have_text(cast.EMAIL_PREVIEW)
    expect(card.locator("code.tool")).to_have_text("send_email")
    expect(card.locator(".badge.risk-irreversible")).to_be_visible()
    expect(card.locator("[data-owner]")).to_have_text("alice")
    expect(card.locator("pre[data-args]")).to_contain_text('"to": "ops@example.com"')
    expect(card.locator("[data-trace-link]")).to_be_visible()
    expect(operator.locator("#queue-empty")).to_be_hidden()
    expect(operator.locator("[data-pending-count]")).to_have_text("1")
    operator.screenshot(path="/tmp/reach-approvals.png", full_page=True)
    # A second open queue (another approver's screen) shows the same card ...
    elsewhere = operator.context.new_page()
    elsewhere.goto("/approvals/")
    expect(elsewhere.locator(".approval-card")).to_have_count(1)

    card.get_by_role("button", name="Approve", exact=True).click()
    expect(operator.locator(".approval-card")).to_have_count(0)
    expect(operator.locator("#recent-decisions")).to_contain_text(cast.EMAIL_PREVIEW)
    # ... and drops it, live, once it is decided here.
    expect(elsewhere.locator(".approval-card")).to_have_count(0)
    expect(elsewhere.locator("#queue-empty")).to_be_visible()
    expect(elsewhere.locator("#recent-decisions")).to_contain_text("operator")

    # Alice's chat follows: the decision, the result, the final answer.
    expect(email_step).to_have_attribute("data-status", "succeeded")
    expect(kv(email_step, "decision")).to_have_text("decisionapproved by operator")
    expect(kv(email_step, "result")).to_contain_text('"sent"')
    reply = alice.locator("[data-reply]")
    expect(reply).to_have_text("Done: the report went to ops@example.com.")
    expect(alice.locator("[data-task-status]").first).to_have_text("succeeded")
    expect(alice.locator("#message")).to_be_enabled()
    alice.screenshot(path="/tmp/reach-approvals-chat.png", full_page=True)

    approval = ApprovalRequest.objects.get()
    assert approval.status == "approved"
    assert approval.decided_by.username == "operator"
    assert Outbox.objects.get().status == "sent"
    assert len(list((tmp_path / "mail").iterdir())) == 1


def test_a_trace_opened_while_its_run_waits_follows_it_to_the_end(
    browser, stack: Stack, served
):
    served(EmailScript())
    alice = log_in(browser, stack, "alice")
    ask_for_the_email(alice)
    task = Task.objects.get()
    operator = log_in(browser, stack, "operator")
    trace = operator.context.new_page()
    trace.goto(f"/traces/{task.pk}/")
    expect(trace.get_by_test_id("task-status")).to_have_text("waiting_approval")
    expect(trace.locator("#live")).to_contain_text("follows it live")

    operator.goto("/approvals/")
    card = operator.locator(".approval-card")
    card.get_by_role("button", name="Approve", exact=True).click()

    # Nobody reloads the trace: it draws itself again as the run goes on.
    expect(trace.get_by_test_id("task-status")).to_have_text("succeeded")
    expect(trace.get_by_test_id("answer")).to_have_text(
        "Done: the report went to ops@example.com."
    )
    expect(trace.locator("#live")).to_have_count(0)
    expect(trace.locator("#rerun")).to_be_visible()


class Scene(NamedTuple):
    """Alice's chat with her email waiting, the operator's queue showing it."""

    model: Any
    alice: Any
    email_step: Any
    operator: Any
    card: Any


def the_email_in_the_queue(browser: Any, stack: Stack, served: Any) -> Scene:
    model = served(EmailScript())
    alice = log_in(browser, stack, "alice")
    email_step = ask_for_the_email(alice)
    operator = log_in(browser, stack, "operator")
    operator.goto("/approvals/")
    return Scene(model, alice, email_step, operator, operator.locator(".approval-card"))


def test_the_queue_checks_edits_and_reasons_before_sending_them(
    browser, stack: Stack, served
):
    model, alice, email_step, operator, card = the_email_in_the_queue(
        browser, stack, served
    )
    expect(card).to_have_count(1)
    requests: list[str] = []
    operator.on(
        "request", lambda r: requests.append(r.url) if "/decision/" in r.url else None
    )

    # Reject needs a reason: nothing is sent without one.
    card.get_by_role("button", name="Reject").click()
    expect(card.locator("[data-error]")).to_contain_text("reason")

    # The editor checks JSON and the tool's schema before anything is sent.
    card.get_by_role("button", name="Edit & approve").click()
    editor = card.locator("textarea.editor")
    expect(editor).to_be_visible()
    editor.fill('{"to": "team@example.com",')
    expect(card.locator("[data-error]")).to_contain_text("Not valid JSON")
    editor.fill(json.dumps({"to": "team@example.com", "subject": 7}))
    card.get_by_role("button", name="Approve edited").click()
    expect(card.locator("[data-error]")).to_contain_text('"subject" must be string')
    expect(card.locator("[data-error]")).to_contain_text('"body" is required')
    assert requests == []
    assert ApprovalRequest.objects.get().status == "pending"

    edited = {**EMAIL, "to": "team@example.com"}
    editor.fill(json.dumps(edited, indent=2))
    expect(card.locator("[data-error]")).to_be_hidden()
    card.get_by_role("button", name="Approve edited").click()
    expect(operator.locator(".approval-card")).to_have_count(0)
    assert len(requests) == 1

    expect(email_step).to_have_attribute("data-status", "succeeded")
    expect(kv(email_step, "arguments")).to_contain_text("team@example.com")
    expect(kv(email_step, "proposed")).to_contain_text("ops@example.com")
    expect(alice.locator("[data-reply]")).to_have_text(
        "Done: the report went to team@example.com.", timeout=TIMEOUT_MS
    )
    approval = ApprovalRequest.objects.get()
    assert approval.diff == {
        "to": {"from": "ops@example.com", "to": "team@example.com"}
    }
    assert Outbox.objects.get().to == "team@example.com"
    assert len(model.handler.requests) == 2


def test_a_rejection_with_a_reason_reaches_alices_chat_and_the_model(
    browser, stack: Stack, served
):
    model, alice, email_step, operator, card = the_email_in_the_queue(
        browser, stack, served
    )

    card.locator("input.reason").fill("Reports go to the team list")
    card.get_by_role("button", name="Reject").click()
    expect(operator.locator(".approval-card")).to_have_count(0)

    expect(email_step).to_have_attribute("data-status", "rejected")
    expect(kv(email_step, "decision")).to_have_text(
        "decisionrejected by operator: “Reports go to the team list”"
    )
    expect(alice.locator("[data-reply]")).to_contain_text("I did not send it")
    expect(alice.locator("[data-reply]")).to_contain_text("Reports go to the team list")
    assert Outbox.objects.count() == 0
    [answer] = tool_messages(model.handler.requests[-1])
    assert "Reports go to the team list" in answer["content"]
