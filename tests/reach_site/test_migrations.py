"""A database built before the re-cut migrates forward with nothing lost.

Before the re-cut every model lived in ``agents`` (the audit log in ``traces``).
The database is taken back to that migration state, filled through the models
as they were then (conversations, a task waiting for approval with its steps,
a tool with versions, a secret, a permission granted through a group, an audit
chain), then migrated forward; afterwards the run shows, the approval decides
and the audit chain verifies.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from audit.services import GENESIS, audit_append, audit_verify, event_hash
from engine.canonical import canonical_hash

pytestmark = [pytest.mark.dbsensitive]

BEFORE = [
    ("agents", "0001_initial"),
    ("approvals", "0002_step_may_have_several_requests"),
    ("traces", "0001_initial"),
    ("effects", None),
    ("runs", None),
    ("registry", None),
    ("audit", None),
    # Newer than the re-cut, and its route targets (0002) need approvals' routes.
    ("notify", None),
]

SEND_EMAIL = {
    "name": "send_email",
    "description": "Send one email.",
    "parameters": {
        "type": "object",
        "properties": {
            "to": {"type": "string"},
            "subject": {"type": "string"},
            "body": {"type": "string"},
        },
        "required": ["to", "subject", "body"],
        "additionalProperties": False,
    },
    "kind": "python",
    "handler": "send_email",
    "risk": "irreversible",
    "approval": "always",
    "approvals_required": 1,
    "approval_ttl_s": 3600,
    "idempotent": False,
    "untrusted_output": False,
    "timeout_s": 10,
    "max_retries": 0,
    "max_result_chars": 4000,
    "result_fields": [],
    "cache_ttl_s": 0,
    "rate_limit_per_min": 0,
    "approval_rule": None,
    "preview_template": "",
    "tags": ["demo"],
    "enabled": True,
    "version": 2,
    "leaves_house": False,
}


def _migrate(targets: list[tuple[str, str | None]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    loader = MigrationExecutor(connection).loader
    ours = {app for app, _ in targets}
    nodes = [(app, name) for app, name in targets if name is not None] + [
        node for node in loader.graph.leaf_nodes() if node[0] not in ours
    ]
    return loader.project_state(nodes).apps


def _latest() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _fill_as_before(apps: Any) -> dict[str, Any]:
    """What a user of the old layout had: written through the old models."""
    user_model = apps.get_model("auth", "User")
    group_model = apps.get_model("auth", "Group")
    permission = apps.get_model("auth", "Permission")
    content_type = apps.get_model("contenttypes", "ContentType")
    agent_model = apps.get_model("agents", "Agent")
    tool_model = apps.get_model("agents", "Tool")
    version_model = apps.get_model("agents", "ToolVersion")
    secret_model = apps.get_model("agents", "Secret")
    conversation_model = apps.get_model("agents", "Conversation")
    message_model = apps.get_model("agents", "Message")
    task_model = apps.get_model("agents", "Task")
    step_model = apps.get_model("agents", "Step")
    note_model = apps.get_model("agents", "Note")
    approval_model = apps.get_model("approvals", "ApprovalRequest")
    event_model = apps.get_model("traces", "AuditEvent")
    head_model = apps.get_model("traces", "AuditHead")

    alice = user_model.objects.create(username="alice", password="!")
    operator = user_model.objects.create(username="operator", password="!")
    # Permissions as the old layout named them (agents.audit_task), granted
    # through a group, as seed_demo did.
    task_type, _ = content_type.objects.get_or_create(app_label="agents", model="task")
    audit_perm, _ = permission.objects.get_or_create(
        codename="audit_task",
        content_type=task_type,
        defaults={"name": "Can read every task, trace and approval"},
    )
    approval_type, _ = content_type.objects.get_or_create(
        app_label="approvals", model="approvalrequest"
    )
    decide_perm, _ = permission.objects.get_or_create(
        codename="decide_approval",
        content_type=approval_type,
        defaults={"name": "Can approve or reject agent actions"},
    )
    auditors = group_model.objects.create(name="old-auditors")
    auditors.permissions.add(audit_perm, decide_perm)
    operator.groups.add(auditors)

    tool = tool_model.objects.create(
        name="send_email",
        description=SEND_EMAIL["description"],
        parameters=SEND_EMAIL["parameters"],
        kind="python",
        handler="send_email",
        risk="irreversible",
        approval="always",
        tags=["demo"],
        version=2,
    )
    for number in (1, 2):
        version_model.objects.create(
            tool=tool, version=number, definition=SEND_EMAIL | {"version": number}
        )
    agent = agent_model.objects.create(name="assistant", tool_tags=["demo"])
    agent.tools.add(tool)
    secret_model.objects.create(name="SHOP_TOKEN", ciphertext="opaque")
    note_model.objects.create(title="缓存改造", content="预算表达式为 128 * 6 + 320。")

    conversation = conversation_model.objects.create(
        owner=alice, agent=agent, title="mail bob"
    )
    now = timezone.now()
    task = task_model.objects.create(
        conversation=conversation,
        agent=agent,
        owner=alice,
        goal="Mail bob the report.",
        status="waiting_approval",
        agent_snapshot={
            "name": "assistant",
            "model": "fake-model",
            "instructions": "",
            "limits": {"max_steps": 8},
            "tools": [SEND_EMAIL],
        },
        model="fake-model",
        rev=3,
        step_count=2,
        started_at=now,
    )
    message_model.objects.create(
        conversation=conversation, role="user", content=task.goal, task=task
    )
    arguments = {"to": "bob@example.com", "subject": "Report", "body": "Attached."}

    def step(seq: int, rev: int, kind: str, status: str, **fields: Any) -> Any:
        return step_model.objects.create(
            task=task,
            seq=seq,
            rev=rev,
            kind=kind,
            status=status,
            started_at=now,
            **fields,
        )

    step(
        1,
        1,
        "model_call",
        "succeeded",
        model="fake-model",
        response={"role": "assistant", "content": None},
        finished_at=now,
    )
    waiting = step(
        2,
        3,
        "tool_call",
        "waiting_approval",
        tool="send_email",
        call_id="call_1",
        arguments=arguments,
        raw_arguments='{"to": "bob@example.com"}',
        idempotency_key=f"{task.pk}:1:0",
    )
    approval = approval_model.objects.create(
        task=task,
        step=waiting,
        tool="send_email",
        risk="irreversible",
        arguments=arguments,
        arguments_hash=canonical_hash(arguments),
        preview="Send mail to bob@example.com",
        requested_by=alice,
        expires_at=now + dt.timedelta(hours=1),
    )

    # An audit chain of three events, hashed as the old code hashed them.
    previous = GENESIS
    for position, kind in enumerate(
        ["task.created", "step.waiting", "approval.requested"], start=1
    ):
        event = event_model(
            position=position,
            kind=kind,
            actor="alice",
            task_id=str(task.pk),
            object_type="task",
            object_id=str(task.pk),
            data={},
            at=now + dt.timedelta(seconds=position),
            prev_hash=previous,
        )
        event.hash = event_hash(event)
        event.save()
        previous = event.hash
    head_model.objects.create(pk=1, position=3, hash=previous)
    return {
        "task": task.pk,
        "conversation": conversation.pk,
        "approval": approval.pk,
        "chain_tip": previous,
    }


@pytest.fixture
def before_the_recut(transactional_db: Any) -> Any:
    """The database at the last migration state before the re-cut."""
    apps = _migrate(BEFORE)
    yield apps
    # Leave the database as every other test expects it.
    _migrate(_latest())


def test_a_database_from_before_the_recut_migrates_forward_with_nothing_lost(
    before_the_recut, api_client_for
):
    old = _fill_as_before(before_the_recut)

    _migrate(_latest())

    from approvals.models import ApprovalRequest
    from effects.models import Note
    from registry.models import Agent, Secret, Tool
    from runs.models import Conversation, Message, Step, Task

    task = Task.objects.get(pk=old["task"])
    assert task.status == "waiting_approval"
    assert [s.seq for s in task.steps.order_by("seq")] == [1, 2]
    assert Conversation.objects.get(pk=old["conversation"]).title == "mail bob"
    assert Message.objects.get(task=task).content == "Mail bob the report."
    assert Step.objects.get(task=task, seq=2).arguments["to"] == "bob@example.com"
    assert list(
        Agent.objects.get(name="assistant").tools.values_list("name", flat=True)
    ) == ["send_email"]
    tool = Tool.objects.get(name="send_email")
    assert sorted(tool.versions.values_list("version", flat=True)) == [1, 2]
    assert Secret.objects.get(name="SHOP_TOKEN").ciphertext == "opaque"
    assert Note.objects.get().title == "缓存改造"

    # Permissions granted on the old app label are still granted.
    operator = User.objects.get(username="operator")
    assert operator.has_perm("runs.audit_task")
    assert operator.has_perm("approvals.decide_approval")
    assert Group.objects.get(name="old-auditors").permissions.count() == 2

    # The run shows through the API, to its owner and to the auditor.
    alice = User.objects.get(username="alice")
    shown = api_client_for(alice).get(f"/api/tasks/{task.pk}/")
    assert shown.status_code == 200
    assert shown.json()["status"] == "waiting_approval"
    steps = api_client_for(operator).get(f"/api/tasks/{task.pk}/steps/?after=0")
    assert [s["seq"] for s in steps.json()["steps"]] == [1, 2]
    versions = api_client_for(alice).get("/api/tools/send_email/versions/")
    assert [v["version"] for v in versions.json()] == [2, 1]

    # The approval decides, once.
    decided = api_client_for(operator).post(
        f"/api/approvals/{old['approval']}/decision/",
        {"decision": "approve"},
        format="json",
    )
    assert decided.status_code == 200, decided.content
    assert ApprovalRequest.objects.get(pk=old["approval"]).status == "approved"
    again = api_client_for(operator).post(
        f"/api/approvals/{old['approval']}/decision/",
        {"decision": "approve"},
        format="json",
    )
    assert again.status_code == 409

    # The old chain verifies, and new events link onto it.
    audit_append(kind="test.after_recut", actor="system", object_id=str(uuid.uuid4()))
    checked, problems = audit_verify()
    assert problems == []
    assert checked >= 4
    from audit.models import AuditEvent

    assert AuditEvent.objects.get(position=3).hash == old["chain_tip"]
    assert AuditEvent.objects.get(position=4).prev_hash == old["chain_tip"]
