"""A local fake of Slack's Web API, and interaction requests signed like Slack's.

``FakeSlack`` is a real HTTP server on loopback (``LocalServer``) that answers
the methods the product calls, the way Slack documents them: ``chat.postMessage``,
``chat.update``, ``chat.postEphemeral``, ``users.lookupByEmail``, ``users.info``,
``views.open`` and ``conversations.open``. It checks the bot token, keeps the
messages it was sent (``messages[(channel, ts)]``) and records every call
(``calls``). ``slack_sdk``'s ``WebClient(base_url=fake.base_url)`` talks to it.

``signed(secret, payload)`` builds the body and headers Slack sends to an
interactivity URL: the payload form-encoded, ``X-Slack-Request-Timestamp`` and
``X-Slack-Signature`` (``v0=`` HMAC-SHA256 of ``v0:<ts>:<body>``), computed here
from the documented recipe, not by the code under test.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import parse_qs, urlencode

from tests.support.http_servers import Hit, LocalServer, Reply

TOKEN = "xoxb-test-token"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
#: The Slack ids of the cast, and the approvals channel.
OPERATOR = "U0OPERATOR"
ALICE = "U0ALICE"
BOB = "U0BOB"
CHANNEL = "C0APPROVALS"


@dataclass
class Call:
    method: str
    args: dict[str, Any]


@dataclass
class SlackUser:
    id: str
    email: str
    confirmed: bool = True
    deleted: bool = False


@dataclass
class FakeSlack:
    """The fake's state; ``start()`` serves it on 127.0.0.1."""

    token: str = TOKEN
    users: dict[str, SlackUser] = field(default_factory=dict)
    messages: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    #: method -> error code answered (``ok: false``) the next times it is called.
    failing: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _counter: itertools.count = field(default_factory=lambda: itertools.count(1))
    server: LocalServer | None = None

    def start(self) -> Self:
        self.server = LocalServer(self._respond).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return self.server.url("/api/")

    def add_user(self, slack_id: str, email: str, **fields: Any) -> SlackUser:
        user = SlackUser(slack_id, email, **fields)
        self.users[slack_id] = user
        return user

    def called(self, method: str) -> list[dict[str, Any]]:
        with self._lock:
            return [c.args for c in self.calls if c.method == method]

    # -- the server ---------------------------------------------------------------

    def _respond(self, hit: Hit) -> Reply:
        method = hit.path.removeprefix("/api/")
        args = _arguments(hit)
        with self._lock:
            self.calls.append(Call(method, args))
            if hit.headers.get("authorization") != f"Bearer {self.token}":
                return Reply(data={"ok": False, "error": "invalid_auth"})
            if method in self.failing:
                return Reply(data={"ok": False, "error": self.failing[method]})
            handler = getattr(self, "_" + method.replace(".", "_"), None)
            if handler is None:
                return Reply(data={"ok": False, "error": "unknown_method"})
            return Reply(data=handler(args))

    def _ts(self) -> str:
        return f"{int(time.time())}.{next(self._counter):06d}"

    def _chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        channel = str(args.get("channel") or "")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        ts = self._ts()
        message = {"text": args.get("text"), "blocks": _blocks(args), "ts": ts}
        self.messages[(channel, ts)] = message
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        key = (str(args.get("channel")), str(args.get("ts")))
        if key not in self.messages:
            return {"ok": False, "error": "message_not_found"}
        self.messages[key] = {
            "text": args.get("text"),
            "blocks": _blocks(args),
            "ts": key[1],
        }
        return {"ok": True, "channel": key[0], "ts": key[1]}

    def _chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "message_ts": self._ts()}

    def _users_lookupByEmail(self, args: dict[str, Any]) -> dict[str, Any]:
        email = str(args.get("email") or "").lower()
        for user in self.users.values():
            if user.email.lower() == email and not user.deleted:
                return {
                    "ok": True,
                    "user": {"id": user.id, "profile": {"email": user.email}},
                }
        return {"ok": False, "error": "users_not_found"}

    def _users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(str(args.get("user")))
        if user is None:
            return {"ok": False, "error": "user_not_found"}
        return {
            "ok": True,
            "user": {
                "id": user.id,
                "deleted": user.deleted,
                "is_email_confirmed": user.confirmed,
                "profile": {"email": user.email},
            },
        }

    def _views_open(self, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("trigger_id"):
            return {"ok": False, "error": "invalid_trigger_id"}
        view = args.get("view")
        view = json.loads(view) if isinstance(view, str) else view
        return {"ok": True, "view": {"id": f"V{next(self._counter)}", **(view or {})}}

    def _conversations_open(self, args: dict[str, Any]) -> dict[str, Any]:
        users = str(args.get("users") or "")
        if users not in self.users:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "channel": {"id": f"D{users}"}}


def _arguments(hit: Hit) -> dict[str, Any]:
    """The call's arguments: the query, then a JSON or form body."""
    args: dict[str, Any] = {k: v[-1] for k, v in hit.query.items()}
    if not hit.body:
        return args
    if "json" in hit.headers.get("content-type", ""):
        args.update(hit.json())
    else:
        args.update({k: v[-1] for k, v in parse_qs(hit.body.decode()).items()})
    return args


def _blocks(args: dict[str, Any]) -> Any:
    blocks = args.get("blocks")
    return json.loads(blocks) if isinstance(blocks, str) else blocks


# -- what Slack sends to the interactivity URL ---------------------------------------


def signed(
    payload: dict[str, Any],
    secret: str = SIGNING_SECRET,
    timestamp: int | None = None,
) -> tuple[bytes, dict[str, str]]:
    """The form body and the signature headers of ``payload``, as Slack signs."""
    body = urlencode({"payload": json.dumps(payload)}).encode()
    ts = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + ts.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return body, {
        "HTTP_X_SLACK_REQUEST_TIMESTAMP": ts,
        "HTTP_X_SLACK_SIGNATURE": f"v0={digest}",
    }


def block_action(
    *, user: str, action_id: str, approval: Any, channel: str, ts: str
) -> dict[str, Any]:
    """A ``block_actions`` payload: ``user`` clicked a button of a message."""
    return {
        "type": "block_actions",
        "user": {"id": user},
        "trigger_id": f"trigger-{time.monotonic_ns()}",
        "container": {"type": "message", "channel_id": channel, "message_ts": ts},
        "channel": {"id": channel},
        "message": {"ts": ts},
        "actions": [
            {"action_id": action_id, "value": str(approval.pk), "type": "button"}
        ],
    }


def reject_submission(
    *, user: str, approval: Any, channel: str, ts: str, reason: str
) -> dict[str, Any]:
    """A ``view_submission`` payload: the reject modal sent with ``reason``."""
    return {
        "type": "view_submission",
        "user": {"id": user},
        "view": {
            "callback_id": "reach_reject_reason",
            "private_metadata": f"{approval.pk}|{channel}|{ts}",
            "state": {"values": {"reason": {"reason_input": {"value": reason}}}},
        },
    }
