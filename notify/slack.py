"""Slack: the Block Kit message of a request, posting and updating it, and the
interactions (Approve, Reject with a reason) that come back.

The bot token and the signing secret come from the product's secret store
(``SLACK_BOT_TOKEN`` and ``SLACK_SIGNING_SECRET`` by default: the admin's
Secrets, or ``REACH_SECRET_<NAME>``). Every Web API call goes through
``slack_sdk``'s ``WebClient`` at ``REACH_SLACK_API_URL``, with a timeout.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from approvals.models import ApprovalDecision, ApprovalRequest
from infra.runtime import redactor
from notify.payloads import queue_url
from registry.secrets import secret_value

log = logging.getLogger(__name__)

#: The ``action_id``s of the message's buttons and the reject modal's id.
APPROVE_ACTION = "reach_approve"
REJECT_ACTION = "reach_reject"
OPEN_ACTION = "reach_open"
REJECT_VIEW = "reach_reject_reason"
REASON_BLOCK = "reason"
REASON_INPUT = "reason_input"

#: What the updated message says of each way a request ends.
ENDED_AS = {
    ApprovalRequest.Status.APPROVED: ":white_check_mark: Approved",
    ApprovalRequest.Status.REJECTED: ":x: Rejected",
    ApprovalRequest.Status.EXPIRED: ":hourglass: Expired undecided",
    ApprovalRequest.Status.CANCELLED: ":no_entry_sign: Cancelled with its run",
}


class SlackNotConfigured(Exception):
    """No bot token (or signing secret) in the secret store."""


class SlackCallFailed(Exception):
    """A Web API call failed (retried by the delivery)."""


def bot_token() -> str:
    name = settings.REACH_SLACK_BOT_TOKEN_SECRET
    token = secret_value(name)
    if not token:
        raise SlackNotConfigured(f"No Slack bot token: store the secret {name}.")
    return token


def signing_secret() -> str:
    name = settings.REACH_SLACK_SIGNING_SECRET
    secret = secret_value(name)
    if not secret:
        raise SlackNotConfigured(f"No Slack signing secret: store the secret {name}.")
    return secret


def client(token: str | None = None) -> WebClient:
    """A Web API client with the bot token, at ``REACH_SLACK_API_URL``."""
    base = settings.REACH_SLACK_API_URL
    return WebClient(
        token=token or bot_token(),
        base_url=base if base.endswith("/") else base + "/",
        timeout=int(settings.REACH_SLACK_TIMEOUT_S),
    )


def call(method: Any, **arguments: Any) -> dict[str, Any]:
    """Call one Web API method of a :class:`WebClient` (``web.chat_update``),
    which encodes it as Slack expects; any failure is :class:`SlackCallFailed`."""
    try:
        response = method(**arguments)
    except SlackApiError as exc:
        error = exc.response.get("error", "unknown") if exc.response else "unknown"
        raise SlackCallFailed(f"{_name(method)}: {error}") from exc
    except (SlackClientError, OSError) as exc:
        raise SlackCallFailed(f"{_name(method)}: {exc}") from exc
    return dict(response.data) if isinstance(response.data, dict) else {}


def _name(method: Any) -> str:
    return str(getattr(method, "__name__", method)).replace("_", ".", 1)


# -- the message ------------------------------------------------------------------


def escape(text: str) -> str:
    """Text for mrkdwn: what Slack asks to escape, so model output cannot
    mention ``@channel`` or forge a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _summary(approval: ApprovalRequest) -> list[dict[str, Any]]:
    clean = redactor().text
    reasons = [escape(clean(str(r))) for r in approval.reasons or []]
    fields = [
        {"type": "mrkdwn", "text": f"*Tool*\n`{escape(approval.tool)}`"},
        {"type": "mrkdwn", "text": f"*Risk*\n{escape(approval.risk)}"},
        {
            "type": "mrkdwn",
            "text": f"*Requested by*\n{escape(approval.requested_by.get_username())}",
        },
        {
            "type": "mrkdwn",
            "text": f"*Expires*\n<!date^{int(approval.expires_at.timestamp())}"
            f"^{{date_short_pretty}} {{time}}|{approval.expires_at.isoformat()}>",
        },
    ]
    blocks: list[dict[str, Any]] = [
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": f"*Approval needed*\n{escape(clean(approval.preview))}",
            },
        },
        {"type": "section", "fields": fields},
    ]
    if reasons:
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {"type": "mrkdwn", "text": "*Why:* " + "; ".join(reasons)}
                ],
            }
        )
    if approval.tainted_by:
        sources = ", ".join(escape(str(s)) for s in approval.tainted_by)
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {"type": "mrkdwn", "text": f"*Untrusted input from:* {sources}"}
                ],
            }
        )
    return blocks


def outcome_text(approval: ApprovalRequest) -> str:
    """Who decided what, when (or how the request otherwise ended)."""
    status = ApprovalRequest.Status(approval.status)
    said = ENDED_AS.get(status, status.label)
    if approval.decision in (ApprovalDecision.MARK_DONE, ApprovalDecision.RETRY):
        # A recovery request: say which of its two approvals it was.
        said += f" ({ApprovalDecision(approval.decision).label})"
    if approval.decided_by is not None:
        said += f" by *{escape(approval.decided_by.get_username())}*"
    if approval.decided_at is not None:
        said += (
            f" <!date^{int(approval.decided_at.timestamp())}^{{date_short_pretty}}"
            f" {{time}}|{approval.decided_at.isoformat()}>"
        )
    if approval.reason:
        said += f": {escape(approval.reason)}"
    return said


def message(approval: ApprovalRequest) -> tuple[str, list[dict[str, Any]]]:
    """The fallback text and the blocks of ``approval``'s message, as it is now:
    with the buttons while pending, with its outcome after."""
    blocks = _summary(approval)
    text = f"Approval needed: {approval.tool}: {redactor().text(approval.preview)}"
    open_button = {
        "type": "button",
        "action_id": OPEN_ACTION,
        "text": {"type": "plain_text", "text": "Open in Agent Reach"},
        "url": queue_url(approval),
    }
    if approval.status == ApprovalRequest.Status.PENDING:
        value = str(approval.pk)
        blocks.append(
            {
                "type": "actions",
                "block_id": f"reach_decide:{value}",
                "elements": [
                    {
                        "type": "button",
                        "action_id": APPROVE_ACTION,
                        "style": "primary",
                        "text": {"type": "plain_text", "text": "Approve"},
                        "value": value,
                    },
                    {
                        "type": "button",
                        "action_id": REJECT_ACTION,
                        "style": "danger",
                        "text": {"type": "plain_text", "text": "Reject…"},
                        "value": value,
                    },
                    open_button,
                ],
            }
        )
        return text, blocks
    outcome = outcome_text(approval)
    blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": outcome}})
    blocks.append({"type": "actions", "elements": [open_button]})
    return f"{text} — {outcome}", blocks


def reject_modal(approval: ApprovalRequest, *, channel: str, ts: str) -> dict[str, Any]:
    """The modal asking for the reason of a rejection."""
    return {
        "type": "modal",
        "callback_id": REJECT_VIEW,
        "private_metadata": f"{approval.pk}|{channel}|{ts}",
        "title": {"type": "plain_text", "text": "Reject the request"},
        "submit": {"type": "plain_text", "text": "Reject"},
        "close": {"type": "plain_text", "text": "Cancel"},
        "blocks": [
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": escape(approval.preview)},
            },
            {
                "type": "input",
                "block_id": REASON_BLOCK,
                "label": {
                    "type": "plain_text",
                    "text": "Why? (goes back to the agent)",
                },
                "element": {
                    "type": "plain_text_input",
                    "action_id": REASON_INPUT,
                    "multiline": True,
                    "max_length": 2000,
                },
            },
        ],
    }


# -- posting and updating ---------------------------------------------------------


@dataclass(frozen=True)
class Posted:
    channel: str
    ts: str
    slack_user: str = ""


def post_to_channel(
    web: WebClient, approval: ApprovalRequest, *, channel: str
) -> Posted:
    text, blocks = message(approval)
    answer = call(web.chat_postMessage, channel=channel, text=text, blocks=blocks)
    return Posted(channel=str(answer.get("channel") or channel), ts=str(answer["ts"]))


def dm_channel(web: WebClient, *, email: str) -> tuple[str, str] | None:
    """The Slack user with ``email`` and the DM channel with them; None when
    Slack knows no such user."""
    try:
        found = web.users_lookupByEmail(email=email)
    except SlackApiError as exc:
        if exc.response is not None and exc.response.get("error") == "users_not_found":
            return None
        error = exc.response.get("error", "unknown") if exc.response else "unknown"
        raise SlackCallFailed(f"users.lookupByEmail: {error}") from exc
    except (SlackClientError, OSError) as exc:
        raise SlackCallFailed(f"users.lookupByEmail: {exc}") from exc
    user_id = str(found["user"]["id"])
    opened = call(web.conversations_open, users=user_id)
    return user_id, str(opened["channel"]["id"])


def update(web: WebClient, approval: ApprovalRequest, *, channel: str, ts: str) -> None:
    text, blocks = message(approval)
    call(web.chat_update, channel=channel, ts=ts, text=text, blocks=blocks)


def tell(web: WebClient, *, channel: str, user: str, text: str) -> None:
    """An ephemeral line to ``user`` in ``channel``; failures only logged (the
    answer to the interaction says the same)."""
    try:
        call(web.chat_postEphemeral, channel=channel, user=user, text=text)
    except SlackCallFailed as exc:
        log.warning("could not tell %s in %s: %s", user, channel, exc)


def verified_email(web: WebClient, *, slack_user: str) -> str | None:
    """The confirmed e-mail address of a Slack user (users.info), else None."""
    info = call(web.users_info, user=slack_user)
    user = info.get("user") or {}
    email = (user.get("profile") or {}).get("email")
    if not email or not user.get("is_email_confirmed") or user.get("deleted"):
        return None
    return str(email)
