"""Real Chromium (Debian's, driven by Playwright) against the real stack.

The stack fixture runs the web server, a Celery worker and Redis as subprocesses on this
test's database; the model is a scripted server in this process, so each test
scripts it. Users log in through the login form (``tests.support.browser``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.browser import real_password
from tests.support.cast import PASSWORD
from tests.support.replies import Handler
from tests.support.scripted_model import ScriptedModel
from tests.support.stack import Stack


@pytest.fixture
def served(request: pytest.FixtureRequest, demo: Any) -> Iterator[Any]:
    """``served(handler)`` -> the scripted model; starts worker and web against it."""
    site: Stack = request.getfixturevalue("stack")
    for user in (demo.alice, demo.bob, demo.operator, demo.admin):
        real_password(user, PASSWORD)
    models: list[ScriptedModel] = []

    def serve(handler: Handler, latency_s: float = 0.0) -> ScriptedModel:
        model = ScriptedModel(handler, latency_s=latency_s).start()
        models.append(model)
        site.env["OPENAI_BASE_URL"] = model.base_url
        site.start_worker()
        site.start_web()
        return model

    yield serve
    site.stop()
    for model in models:
        model.stop()
