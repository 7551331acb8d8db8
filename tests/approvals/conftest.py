"""Fixtures of the approval tests: runs that wait for a decision."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.support.cast import EMAIL
from tests.support.replies import Script, text, tool_call, tool_calls
from tests.support.runs import Waiting, ask, pending


@pytest.fixture
def email_waiting(model: Any) -> Callable[..., Waiting]:
    """``email_waiting(user, agent, answer, also_to=None)`` -> ``Waiting``.

    ``user`` asks to mail the report (``EMAIL``) to ops, and to ``also_to`` in the
    same turn when given; each email waits for approval. The scripted model then
    answers ``answer``.
    """

    def make(
        user: Any,
        agent: Any,
        answer: str = "The report is sent.",
        also_to: str | None = None,
    ) -> Waiting:
        if also_to is None:
            emails = tool_call("send_email", EMAIL)
            content = "Mail the report to ops"
        else:
            emails = tool_calls(
                [("send_email", EMAIL), ("send_email", {**EMAIL, "to": also_to})]
            )
            content = f"Mail the report to ops and {also_to.split('@')[0]}"
        script = model(Script([emails, text(answer)])).handler
        task = ask(user, agent, content)
        return Waiting(task, pending(task), script)

    return make
