"""Fixtures of the memory tests: an agent that has the memory tools, and one
remembered item each for alice and bob."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest


@pytest.fixture
def companion(demo: SimpleNamespace) -> Any:
    """The demo tools plus remember, recall and forget: the operator's step of
    adding the ``memory`` tag to an agent."""
    from memory.builtins import MEMORY_TAG
    from registry.models import Agent

    return Agent.objects.create(
        name="companion",
        description="The demo assistant with long-term memory.",
        instructions="You are a helpful assistant with memory.",
        tool_tags=["demo", MEMORY_TAG],
    )


@pytest.fixture
def items(alice: Any, bob: Any) -> dict[str, Any]:
    """alice's preference (with Chinese text to search for) and bob's secret."""
    from tests.support.memory import remembered

    return {
        "alice": remembered(alice, "Alice prefers tea, 绿茶.", "drink"),
        "bob": remembered(bob, "Bob's bank PIN hint is his dog.", "pin"),
    }
