"""Fixtures of the memory tests: an agent that has the memory tools."""

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
