"""Fixtures of the notify tests: the fake Slack with the product's secrets
pointing at it, targets, and a run that waits for a decision."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from notify.models import NotifyTarget
from registry.secrets import secret_set
from tests.support.cast import EMAIL
from tests.support.replies import Script, text, tool_call
from tests.support.runs import Waiting, ask, pending
from tests.support.slack_fake import (
    ALICE,
    BOB,
    CHANNEL,
    OPERATOR,
    SIGNING_SECRET,
    TOKEN,
    FakeSlack,
)


@pytest.fixture
def fake_slack(settings: Any, demo: Any) -> Iterator[FakeSlack]:
    """The fake Web API, the bot token and signing secret in the secret store,
    and the cast in the workspace (their demo e-mail addresses, confirmed)."""
    fake = FakeSlack().start()
    settings.REACH_SLACK_API_URL = fake.base_url
    secret_set(name="SLACK_BOT_TOKEN", value=TOKEN)
    secret_set(name="SLACK_SIGNING_SECRET", value=SIGNING_SECRET)
    fake.add_user(OPERATOR, demo.operator.email)
    fake.add_user(ALICE, demo.alice.email)
    fake.add_user(BOB, demo.bob.email)
    yield fake
    fake.stop()


@pytest.fixture
def slack_channel(db: Any) -> NotifyTarget:
    return NotifyTarget.objects.create(
        name="approvals channel",
        kind=NotifyTarget.Kind.SLACK_CHANNEL,
        slack_channel=CHANNEL,
    )


@pytest.fixture
def email_waiting(model: Any, demo: Any) -> Callable[..., Waiting]:
    """``email_waiting(user=alice)`` -> a run of ``user``'s that waits for the
    approval of ``send_email`` (``EMAIL``)."""

    def make(user: Any = None) -> Waiting:
        script = model(Script([tool_call("send_email", EMAIL), text("sent")])).handler
        task = ask(user or demo.alice, demo.agent, "Mail the report to ops")
        return Waiting(task, pending(task), script)

    return make
