"""The migration that brings agent versions gives every existing agent its
version 1: what it was when the migration ran, its tools by name."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("registry", "0006_agent_handoffs")]


def _migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return MigrationExecutor(connection).loader.project_state(targets).apps


def _latest() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


@pytest.fixture
def before_versions(transactional_db: Any) -> Any:
    apps = _migrate(BEFORE)
    yield apps
    _migrate(_latest())


def test_every_existing_agent_gets_its_version_1(before_versions):
    tool_model = before_versions.get_model("registry", "Tool")
    agent_model = before_versions.get_model("registry", "Agent")
    tool = tool_model.objects.create(
        name="calculate", description="Adds.", parameters={"type": "object"}
    )
    agent = agent_model.objects.create(
        name="old-agent", instructions="Be exact.", max_steps=7, tool_tags=["demo"]
    )
    agent.tools.add(tool)
    agent_model.objects.create(name="bare")

    _migrate(_latest())

    from registry.models import Agent, AgentVersion
    from registry.services import version_resolve

    version = AgentVersion.objects.get(agent__name="old-agent")
    assert version.number == 1 and version.note == "first version"
    assert version.snapshot["instructions"] == "Be exact."
    assert version.snapshot["max_steps"] == 7
    assert version.snapshot["tools"] == ["calculate"]
    assert version.snapshot["tool_tags"] == ["demo"]
    assert version_resolve(Agent.objects.get(name="bare")).number == 1
