"""Agent versions and their labels: what a run of an agent uses.

Every save of an agent that changes a field of :data:`AGENT_VERSIONED_FIELDS`
makes an :class:`AgentVersion` (a snapshot of those fields, numbered per
agent). A label (``production``, ``candidate``, any name) points at one version
and can be moved; chats and the API run the version labelled ``production``,
or the newest where the agent has no such label (:func:`version_resolve`).
A rollback makes a new version equal to an old one and applies it to the agent.

Saves anywhere (the admin, a seed, a test's ``agent.save()``) are versioned by
the signals :func:`connect` attaches; the admin defers them for the span of a
form save (:func:`versions_deferred`), so one form makes one version.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import re
from collections.abc import Collection, Iterator
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models.signals import m2m_changed, post_save
from django.utils import timezone

from audit.models import AuditKind
from audit.services import audit_append
from registry.models import (
    AGENT_VERSIONED_FIELDS,
    Agent,
    AgentLabel,
    AgentVersion,
    Tool,
)

# On the path of every run, so in registry.services with the snapshot they feed.
from registry.services import PRODUCTION as PRODUCTION
from registry.services import agent_as_of as agent_as_of
from registry.services import version_resolve as version_resolve

CANDIDATE = "candidate"

_deferred: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "agent_versions_deferred", default=False
)


class VersionError(ValidationError):
    """An unknown agent, version or label, or a label name that is no slug."""


# -- snapshots -------------------------------------------------------------------


def state_of(row: Any, tool_names: Collection[str]) -> dict[str, Any]:
    """The versioned fields of ``row`` (an agent, or a migration's historical
    one) with its tools chosen by name: what a version records."""
    state: dict[str, Any] = {}
    for name in AGENT_VERSIONED_FIELDS:
        value = sorted(tool_names) if name == "tools" else getattr(row, name)
        if isinstance(value, list | tuple):
            value = list(value)
        state[name] = value
    return state


def agent_state(agent: Agent) -> dict[str, Any]:
    """:func:`state_of` the live row (one query: its tools' names)."""
    return state_of(agent, agent.tools.values_list("name", flat=True))


def snapshot_text(snapshot: dict[str, Any]) -> str:
    """A version's snapshot as YAML, one field a line and long text folded, so
    that a unified diff of two reads as what changed."""
    return yaml.safe_dump(
        snapshot, allow_unicode=True, sort_keys=True, width=78, default_flow_style=False
    )


def version_diff(before: AgentVersion | None, after: AgentVersion) -> str:
    """A unified diff of ``after``'s snapshot against ``before``'s ("" if equal)."""
    old = snapshot_text(before.snapshot).splitlines() if before else []
    new = snapshot_text(after.snapshot).splitlines()
    return "\n".join(
        difflib.unified_diff(
            old,
            new,
            fromfile=f"v{before.number}" if before else "(none)",
            tofile=f"v{after.number}",
            lineterm="",
        )
    )


def version_previous(version: AgentVersion) -> AgentVersion | None:
    return (
        AgentVersion.objects.filter(
            agent_id=version.agent_id, number__lt=version.number
        )
        .order_by("-number")
        .first()
    )


# -- recording -------------------------------------------------------------------


def version_record(
    agent: Agent, *, user: Any = None, note: str = ""
) -> AgentVersion | None:
    """A new version of ``agent`` when its versioned fields differ from its
    newest version's (or it has none); None when nothing changed."""
    if agent.pk is None:
        return None
    with transaction.atomic():
        # The agent's row lock orders two saves of one agent.
        Agent.objects.select_for_update().filter(pk=agent.pk).values("pk").first()
        state = agent_state(agent)
        newest = AgentVersion.objects.filter(agent=agent).order_by("-number").first()
        if newest is not None and newest.snapshot == state:
            return None
        return AgentVersion.objects.create(
            agent=agent,
            number=(newest.number + 1) if newest is not None else 1,
            snapshot=state,
            note=note,
            changed_by=user if getattr(user, "is_authenticated", False) else None,
            changed_at=timezone.now(),
        )


@contextlib.contextmanager
def versions_deferred() -> Iterator[None]:
    """No version from the signals inside (the caller records one at its end)."""
    token = _deferred.set(True)
    try:
        yield
    finally:
        _deferred.reset(token)


def _on_agent_saved(sender: Any, instance: Agent, raw: bool = False, **_: Any) -> None:
    if not raw and not _deferred.get():
        version_record(instance)


def _on_tools_changed(
    sender: Any, instance: Any, action: str, reverse: bool, **kwargs: Any
) -> None:
    if _deferred.get() or not action.startswith("post_"):
        return
    if reverse:
        # tool.agents.add(...): each agent on the other side changed.
        for agent in Agent.objects.filter(pk__in=kwargs.get("pk_set") or ()):
            version_record(agent)
    elif isinstance(instance, Agent):
        version_record(instance)


def connect() -> None:
    """Version every save of an agent (registry's AppConfig.ready)."""
    post_save.connect(_on_agent_saved, sender=Agent, dispatch_uid="agent_versions")
    m2m_changed.connect(
        _on_tools_changed, sender=Agent.tools.through, dispatch_uid="agent_tools"
    )


# -- resolving -------------------------------------------------------------------


_REF = re.compile(r"^(?P<agent>[-\w]+)(?:@(?P<which>[-\w]+))?$")


def version_find(agent: Agent, which: str | None) -> AgentVersion:
    """``agent``'s version named by ``which``: a label, ``v3`` or ``3``; None
    or ``""``: the one a chat runs. Raises :class:`VersionError`."""
    if not which:
        found = version_resolve(agent)
    elif re.fullmatch(r"v?\d+", which):
        found = AgentVersion.objects.filter(
            agent=agent, number=int(which.lstrip("v"))
        ).first()
    else:
        label = AgentLabel.objects.filter(agent=agent, name=which).first()
        found = label.version if label is not None else None
    if found is None:
        raise VersionError(
            f"Agent {agent.name} has no version {which}."
            if which
            else f"Agent {agent.name} has no version."
        )
    return found


def version_ref(text: str) -> tuple[Agent, AgentVersion]:
    """``NAME``, ``NAME@label`` or ``NAME@v3``: the agent and the version named."""
    match = _REF.match(text.strip())
    if match is None:
        raise VersionError(f"Not an agent reference: {text!r} (NAME@label).")
    agent = Agent.objects.filter(name=match["agent"]).first()
    if agent is None:
        raise VersionError(f"No agent named {match['agent']!r}.")
    return agent, version_find(agent, match["which"])


def labels_of(agent: Agent) -> dict[int, list[str]]:
    """The labels of ``agent``'s versions, by version number."""
    found: dict[int, list[str]] = {}
    for name, number in AgentLabel.objects.filter(agent=agent).values_list(
        "name", "version__number"
    ):
        found.setdefault(number, []).append(name)
    return found


# -- labels and rollback -----------------------------------------------------------


def label_move(
    *, agent: Agent, name: str, version: AgentVersion, user: Any = None
) -> AgentLabel:
    """Point ``agent``'s label ``name`` at ``version`` (made if new); audited
    with where it pointed before."""
    if version.agent_id != agent.pk:
        raise VersionError(f"v{version.number} is not a version of {agent.name}.")
    if not re.fullmatch(r"[-a-zA-Z0-9_]{1,64}", name or ""):
        raise VersionError("A label is a slug: letters, digits, - and _.")
    with transaction.atomic():
        label = (
            AgentLabel.objects.select_for_update()
            .select_related("version")
            .filter(agent=agent, name=name)
            .first()
        )
        before = label.version.number if label is not None else None
        who = user if getattr(user, "is_authenticated", False) else None
        if label is None:
            label = AgentLabel(agent=agent, name=name)
        label.version = version
        label.moved_by = who
        label.moved_at = timezone.now()
        label.save()
        audit_append(
            kind=AuditKind.AGENT_LABEL_MOVED,
            actor=user,
            object_type="agent",
            object_id=agent.name,
            data={"label": name, "from": before, "to": version.number},
        )
    return label


def label_promote(
    *, agent: Agent, source: str, target: str = PRODUCTION, user: Any = None
) -> AgentLabel:
    """Move ``target`` to the version ``source`` (a label or ``v3``) names."""
    return label_move(
        agent=agent, name=target, version=version_find(agent, source), user=user
    )


def version_rollback(
    *, agent: Agent, version: AgentVersion, user: Any = None
) -> AgentVersion:
    """Apply ``version``'s snapshot to ``agent`` and record it as a NEW version
    (an old one is never reused: the history says what was live when)."""
    if version.agent_id != agent.pk:
        raise VersionError(f"v{version.number} is not a version of {agent.name}.")
    note = f"rollback to v{version.number}"
    with transaction.atomic(), versions_deferred():
        copy, names = agent_as_of(agent, version)
        for name in AGENT_VERSIONED_FIELDS:
            if name != "tools":
                setattr(agent, name, getattr(copy, name))
        agent.save()
        agent.tools.set(Tool.objects.filter(name__in=names))
        newest = AgentVersion.objects.filter(agent=agent).order_by("-number").first()
        made = AgentVersion.objects.create(
            agent=agent,
            number=(newest.number + 1) if newest is not None else 1,
            snapshot=agent_state(agent),
            note=note,
            changed_by=user if getattr(user, "is_authenticated", False) else None,
            changed_at=timezone.now(),
        )
        audit_append(
            kind=AuditKind.AGENT_ROLLED_BACK,
            actor=user,
            object_type="agent",
            object_id=agent.name,
            data={"from": version.number, "version": made.number},
        )
    return made
