"""The demo cast, tools, notes and agent profiles (``manage.py seed_demo``)."""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import transaction

from approvals.models import ApprovalRoute
from automations.seed import seed_demo_schedule
from effects.models import Note
from guardrails.seed import seed_demo_guardrails
from memory.seed import seed_memory_tools
from registry import versions
from registry.models import Agent, AgentLabel, AgentVersion, Tool
from registry.services import agent_handoffs_set, tool_save

DEMO_NOTES = [
    ("缓存改造", "使用 Redis 缓存热点查询，预算表达式为 128 * 6 + 320。"),
    ("日志系统", "使用文件轮转和定时归档，保留最近七天记录。"),
    ("搜索实验", "比较倒排索引与向量检索，预算表达式为 500 + 240。"),
]

DEMO_TOOLS: list[dict[str, Any]] = [
    {
        "name": "calculate",
        "description": (
            "Evaluate an arithmetic expression with numbers, + - * / and parentheses. "
            "Returns the expression and its result. Use it for every calculation."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": (
                        "The arithmetic expression, e.g. 128 * 6 + 320 or (2 + 3) * 4"
                    ),
                }
            },
            "required": ["expression"],
            "additionalProperties": False,
        },
        "risk": "read_only",
        "result_fields": ["/expression", "/result"],
        "timeout_s": 5.0,
        "max_retries": 1,
    },
    {
        "name": "search_notes",
        "description": (
            "Search the team's project notes. Returns the notes (title and content) "
            "whose title or content contains any word of the keyword, newest first, "
            "at most 10."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "keyword": {
                    "type": "string",
                    "description": "One or more words to look for, e.g. Redis",
                }
            },
            "required": ["keyword"],
            "additionalProperties": False,
        },
        "risk": "read_only",
        "untrusted_output": True,
        "result_fields": ["/title", "/content"],
        "timeout_s": 5.0,
        "max_retries": 1,
    },
    {
        "name": "create_ticket",
        # "Only when the user asks": without it the built-in model opened a ticket
        # after answering a question from the notes (notes-local's which-archive-zh,
        # 1 of 3 runs passed; 3 of 3 with it). Said in the instructions instead, it
        # made the model open more of them.
        "description": (
            "Create a ticket in the team's tracker. Changes: adds one ticket with "
            "this title and body (visible to the team in the admin). Only when the "
            "user asks for a ticket."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "description": "A short title"},
                "body": {"type": "string", "description": "What needs to be done"},
            },
            "required": ["title", "body"],
            "additionalProperties": False,
        },
        "risk": "write",
        "preview_template": "Create ticket “{title}”",
        "timeout_s": 5.0,
    },
    {
        "name": "send_email",
        "description": (
            "Send an email to one address. Irreversible: the message leaves the "
            "company. Changes: sends one email. Only when the user asks to send an "
            "email."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "to": {
                    "type": "string",
                    "format": "email",
                    "description": "One email address, e.g. ops@example.com",
                },
                "subject": {"type": "string", "description": "The subject line"},
                "body": {"type": "string", "description": "The message text"},
            },
            "required": ["to", "subject", "body"],
            "additionalProperties": False,
        },
        "risk": "irreversible",
        "approval": "always",
        "preview_template": "Send email to {to} — subject: {subject}",
        "timeout_s": 10.0,
    },
]

ASSISTANT_INSTRUCTIONS = (
    "You are the Agent Reach assistant for a software team. Use the tools: "
    "search_notes to look things up in the team's project notes, calculate for "
    "every calculation (never compute in your head). Answer briefly in the user's "
    "language and name the note you used."
)

#: The demo's candidate (v2): an edit a newcomer compares with production (v1)
#: and promotes.
ASSISTANT_INSTRUCTIONS_V2 = (
    ASSISTANT_INSTRUCTIONS
    + " When a note gives a budget expression, calculate it and give the total "
    "first, then the note's title."
)

TRIAGE_INSTRUCTIONS = (
    "You are the front desk of Agent Reach for a software team. You answer "
    "nothing yourself: hand every question about the team's project notes, "
    "budgets or calculations to the assistant with transfer_to_assistant."
)
#: What the triage agent's model reads of its one handoff target.
TRIAGE_TO_ASSISTANT = (
    "Questions about the team's project notes, budgets and calculations: it "
    "searches the notes and calculates."
)


def demo_password() -> str:
    """REACH_DEMO_PASSWORD, or one generated once and kept in var/."""
    if settings.REACH_DEMO_PASSWORD:
        return str(settings.REACH_DEMO_PASSWORD)
    path = settings.VAR_DIR / "demo_password"
    if path.exists():
        return path.read_text().strip()
    password = secrets.token_urlsafe(9)
    path.write_text(password + "\n")
    path.chmod(0o600)
    return password


@transaction.atomic
def seed_demo() -> list[str]:
    """Create what is missing; never overwrite an operator's edits."""
    created: list[str] = []
    approvers, _ = Group.objects.get_or_create(name="approvers")
    auditors, _ = Group.objects.get_or_create(name="auditors")
    approvers.permissions.add(
        Permission.objects.get(
            codename="decide_approval", content_type__app_label="approvals"
        )
    )
    auditors.permissions.add(
        Permission.objects.get(codename="audit_task", content_type__app_label="runs"),
        Permission.objects.get(codename="run_eval", content_type__app_label="evals"),
        Permission.objects.get(
            codename="view_console", content_type__app_label="console"
        ),
    )
    # Acting on anyone's runs from the console is a power of its own.
    operators, _ = Group.objects.get_or_create(name="operators")
    operators.permissions.add(
        *Permission.objects.filter(
            codename__in=["view_console", "operate_console"],
            content_type__app_label="console",
        )
    )
    # Labelling runs in the review queue (feedback/).
    reviewers, _ = Group.objects.get_or_create(name="reviewers")
    reviewers.permissions.add(
        Permission.objects.get(
            codename="review_runs", content_type__app_label="feedback"
        )
    )
    # The demo routes' deciders (DEMO_ROUTES).
    payments, _ = Group.objects.get_or_create(name="payments")
    release, _ = Group.objects.get_or_create(name="release")
    users = get_user_model().objects
    password = demo_password()
    cast = [
        ("admin", {"is_superuser": True, "is_staff": True}, []),
        (
            "operator",
            {"is_staff": False},
            [approvers, auditors, operators, reviewers],
        ),
        ("alice", {}, []),
        ("bob", {}, []),
        # Approvers by route only (DEMO_ROUTES): no approver permission, so
        # they see and decide nothing else.
        ("fiona", {}, [payments]),
        ("devon", {}, [release]),
    ]
    for username, flags, groups in cast:
        if users.filter(username=username).exists():
            continue
        user = users.create_user(
            username=username,
            password=password,
            email=f"{username}@example.com",
            **flags,
        )
        user.groups.add(*groups)
        created.append(f"user {username}")

    for definition in DEMO_TOOLS:
        if Tool.objects.filter(name=definition["name"]).exists():
            continue
        tool = Tool(kind=Tool.Kind.PYTHON, handler=definition["name"], tags=["demo"])
        for key, value in definition.items():
            setattr(tool, key, value)
        tool_save(tool=tool, user=None)
        created.append(f"tool {tool.name}")

    # remember, recall, forget: registered, offered to no agent until an
    # operator adds the "memory" tag to it.
    created += seed_memory_tools()

    for title, content in DEMO_NOTES:
        if not Note.objects.filter(title=title).exists():
            Note.objects.create(title=title, content=content)
            created.append(f"note {title}")

    if not Agent.objects.filter(name="assistant").exists():
        Agent.objects.create(
            name="assistant",
            description="The demo assistant: searches project notes and calculates.",
            instructions=ASSISTANT_INSTRUCTIONS,
            tool_tags=["demo"],
            is_default=not Agent.objects.filter(is_default=True).exists(),
        )
        created.append("agent assistant")
    assistant = Agent.objects.filter(name="assistant").first()
    if assistant is not None and not Agent.objects.filter(name="triage").exists():
        # A front desk that hands the conversation on (README.md "Handoffs
        # between agents").
        triage = Agent.objects.create(
            name="triage",
            description="The front desk: hands each question to the agent for it.",
            instructions=TRIAGE_INSTRUCTIONS,
        )
        agent_handoffs_set(agent=triage, targets=[(assistant, TRIAGE_TO_ASSISTANT)])
        created.append("agent triage")
    created += seed_demo_guardrails(assistant=assistant)
    alice = users.filter(username="alice").first()
    if assistant is not None and alice is not None:
        created += seed_demo_schedule(owner=alice, agent=assistant)
    created += seed_demo_routes()
    return created


#: Two approver routes (approvals.routing), so routing shows without setup:
#: (name, tool, condition, deciders' group, escalation group, minutes).
DEMO_ROUTES = [
    (
        "refunds",
        "send_email",
        'contains(subject, "refund")',
        "payments",
        "approvers",
        30,
        "Mail about a refund: payments decides; unanswered for 30 minutes, the "
        "approvers are added.",
    ),
    (
        "deploys",
        "create_ticket",
        'contains(title, "deploy")',
        "release",
        None,
        None,
        "A ticket about a deploy (it waits when the run read untrusted notes): "
        "release decides.",
    ),
]


def seed_demo_routes() -> list[str]:
    """The demo's approver routes, when missing (never overwriting edits)."""
    created = []
    for name, tool, condition, group, escalation, minutes, about in DEMO_ROUTES:
        if ApprovalRoute.objects.filter(name=name).exists():
            continue
        route = ApprovalRoute.objects.create(
            name=name,
            tool=tool,
            condition=condition,
            description=about,
            escalate_after_minutes=minutes,
        )
        route.approver_groups.add(Group.objects.get(name=group))
        if escalation:
            route.escalation_groups.add(Group.objects.get(name=escalation))
        created.append(f"route {name}")
    return created


@transaction.atomic
def seed_demo_versions() -> list[str]:
    """The assistant's two versions (``manage.py seed_demo``): v1 labelled
    production, an edited v2 labelled candidate, to compare and promote. Only
    for an assistant still at its first version with no label (never over an
    operator's edits)."""
    assistant = Agent.objects.filter(name="assistant").first()
    if assistant is None or AgentLabel.objects.filter(agent=assistant).exists():
        return []
    first = list(AgentVersion.objects.filter(agent=assistant))
    if len(first) != 1:
        return []
    assistant.instructions = ASSISTANT_INSTRUCTIONS_V2
    with versions.versions_deferred():
        assistant.save()
    candidate = versions.version_record(assistant, note="demo seed: an edit to compare")
    if candidate is None:
        return []
    versions.label_move(agent=assistant, name=versions.PRODUCTION, version=first[0])
    versions.label_move(agent=assistant, name=versions.CANDIDATE, version=candidate)
    return ["agent assistant v2 (candidate; v1 is production)"]
