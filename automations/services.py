"""Schedules and triggers: saving them, firing them, starting their runs.

A schedule's due time is claimed by a guarded UPDATE of ``next_due_at`` (from
the due time the tick read to the next one) in the transaction that starts its
run, so two beats, or a tick repeated after a crash, start one run per due time.
A run is its owner's, with the owner's permissions: an owner who is inactive or
may no longer use the agent pauses the schedule, with the reason, and starts
nothing.
"""

from __future__ import annotations

import json
import secrets
import string
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.models import AuditKind
from audit.services import audit_append
from automations.cadence import CadenceError
from automations.models import Schedule, Trigger
from automations.signing import Refusal, SignatureRefused, verify
from infra import runtime
from infra.errors import ErrorKind, ServiceError
from registry.access import may_use_agent
from registry.secrets import seal, unseal
from runs import services as runs
from runs.models import Task

# -- who may run ------------------------------------------------------------------


def owner_refusal(owner: Any, agent: Any) -> str | None:
    """Why ``owner`` may not run ``agent`` now, or None when they may."""
    if not owner.is_active:
        return f"The owner {owner.get_username()} is deactivated."
    if not may_use_agent(owner, agent):
        return f"The owner {owner.get_username()} may no longer use {agent.name}."
    return None


def _start_run(
    *,
    owner: Any,
    agent: Any,
    content: str,
    source: str,
    title: str,
    webhook_url: str = "",
):
    """A run in a conversation of its own (so it never waits behind another),
    which posts its outcome to the schedule's or trigger's ``webhook_url``."""
    conversation = runs.conversation_create(
        owner=owner, agent=agent, webhook_url=webhook_url
    )
    if title:
        conversation.title = title[:200]
        conversation.save(update_fields=["title"])
    task = runs.task_start(
        conversation=conversation, content=content, enforce_budget=True, source=source
    )
    return task


#: Where a schedule's or trigger's runs post their outcome, checked as a
#: conversation's is (the SSRF rules of HTTP tools): the forms' check too.
WebhookUrlInvalid = runs.WebhookUrlInvalid
webhook_url_checked = runs.webhook_url_checked


# -- schedules -------------------------------------------------------------------


def schedule_check(schedule: Schedule, *, now: datetime | None = None) -> None:
    """Refuse a cadence that never fires, fires too often or names no zone
    (:class:`CadenceError`, its message for the form)."""
    schedule.cadence().validate(
        min_interval_s=settings.REACH_SCHEDULE_MIN_INTERVAL_S,
        now=now or timezone.now(),
    )
    if not schedule.message.strip():
        raise CadenceError("Give the message the run is asked.")


def schedule_save(*, schedule: Schedule, user: Any) -> Schedule:
    """Validate and save ``schedule``; its next due time from now. Audited."""
    now = timezone.now()
    if schedule._state.adding:
        schedule.created_at = now
    schedule_check(schedule, now=now)
    schedule.webhook_url = webhook_url_checked(schedule.webhook_url)
    schedule.next_due_at = schedule.cadence().next_after(now)
    schedule.updated_at = now
    with transaction.atomic():
        schedule.save()
        audit_append(
            kind=AuditKind.SCHEDULE_SAVED,
            actor=user,
            object_type="schedule",
            object_id=schedule.pk,
            data=_described(schedule),
        )
    return schedule


def _described(schedule: Schedule) -> dict[str, Any]:
    return {
        "name": schedule.name,
        "owner": schedule.owner.get_username(),
        "agent": schedule.agent.name,
        "cadence": schedule.cadence_text,
        "missed": schedule.missed,
        "paused": schedule.paused,
        "webhook_url": schedule.webhook_url or None,
    }


def schedule_pause(*, schedule: Schedule, user: Any, reason: str = "") -> Schedule:
    with transaction.atomic():
        Schedule.objects.filter(pk=schedule.pk).update(
            paused=True, paused_reason=reason[:300], updated_at=timezone.now()
        )
        audit_append(
            kind=AuditKind.SCHEDULE_PAUSED,
            actor=user,
            object_type="schedule",
            object_id=schedule.pk,
            data={"reason": reason[:300]},
        )
    schedule.refresh_from_db()
    return schedule


def schedule_resume(*, schedule: Schedule, user: Any) -> Schedule:
    """Resume from now on: due times that passed while it was paused are not
    run (the missed policy is for downtime, not for a pause)."""
    now = timezone.now()
    with transaction.atomic():
        Schedule.objects.filter(pk=schedule.pk).update(
            paused=False,
            paused_reason="",
            next_due_at=schedule.cadence().next_after(now),
            updated_at=now,
        )
        audit_append(
            kind=AuditKind.SCHEDULE_RESUMED,
            actor=user,
            object_type="schedule",
            object_id=schedule.pk,
        )
    schedule.refresh_from_db()
    return schedule


class ScheduleRefused(ServiceError):
    """The schedule's owner may not run it now (the message says why)."""

    default_kind = ErrorKind.CONFLICT


def schedule_run_now(*, schedule: Schedule, user: Any) -> Task:
    """One run now, beside the due times (which stay as they are)."""
    refusal = owner_refusal(schedule.owner, schedule.agent)
    if refusal is not None:
        raise ScheduleRefused(refusal)
    with transaction.atomic():
        task = _start_run(
            owner=schedule.owner,
            agent=schedule.agent,
            content=schedule.message,
            source=schedule.source,
            title=schedule.name,
            webhook_url=schedule.webhook_url,
        )
        Schedule.objects.filter(pk=schedule.pk).update(last_task=task)
        audit_append(
            kind=AuditKind.SCHEDULE_RUN_NOW,
            actor=user,
            task_id=task.pk,
            object_type="schedule",
            object_id=schedule.pk,
        )
    return task


def schedules_tick(*, now: datetime | None = None) -> list[Task]:
    """Fire every schedule whose due time has come; the runs started.

    Safe to run in several processes at once and after any gap: each due time
    is claimed by one guarded UPDATE, and one tick starts at most one run per
    schedule (:func:`schedule_fire`).
    """
    now = now or timezone.now()
    due = list(
        Schedule.objects.filter(paused=False, next_due_at__lte=now)
        .order_by("next_due_at")
        .values_list("pk", "next_due_at")[:200]
    )
    started = []
    for pk, due_at in due:
        task = schedule_fire(schedule_id=pk, due_at=due_at, now=now)
        if task is not None:
            started.append(task)
    return started


def schedule_fire(*, schedule_id: Any, due_at: datetime, now: datetime) -> Task | None:
    """Claim the due time ``due_at`` of the schedule and start its run.

    The claim moves ``next_due_at`` to the first due time after ``now``; it
    succeeds for one caller only (the row still holding ``due_at``). Due times
    missed by more than ``REACH_SCHEDULE_LATE_S`` (the beat was down) start one
    run under ``run_once`` and none under ``skip``. An owner who may not run it
    pauses the schedule with the reason instead.
    """
    with transaction.atomic():
        schedule = (
            Schedule.objects.select_related("owner", "agent")
            .filter(pk=schedule_id, paused=False, next_due_at=due_at)
            .first()
        )
        if schedule is None:
            return None
        cadence = schedule.cadence()
        following = cadence.next_after(now)
        claimed = Schedule.objects.filter(
            pk=schedule_id, paused=False, next_due_at=due_at
        ).update(next_due_at=following, last_fired_at=now, updated_at=now)
        if not claimed:
            return None
        # The latest due time that passed: on time, or missed by downtime.
        latest = max(due_at, cadence.latest_until(now) or due_at)
        late = (now - latest) > timedelta(seconds=settings.REACH_SCHEDULE_LATE_S)
        missed = late and schedule.missed == Schedule.Missed.SKIP
        audit = {
            "due_at": due_at.isoformat(),
            "latest_due_at": latest.isoformat(),
            "next_due_at": following.isoformat(),
        }
        refusal = owner_refusal(schedule.owner, schedule.agent)
        if refusal is not None:
            Schedule.objects.filter(pk=schedule_id).update(
                paused=True, paused_reason=refusal[:300]
            )
            audit_append(
                kind=AuditKind.SCHEDULE_PAUSED,
                actor="system",
                object_type="schedule",
                object_id=schedule_id,
                data={"reason": refusal, **audit},
            )
            return None
        if missed:
            audit_append(
                kind=AuditKind.SCHEDULE_FIRED,
                actor="system",
                object_type="schedule",
                object_id=schedule_id,
                data={"skipped": "missed", **audit},
            )
            return None
        try:
            with transaction.atomic():
                task = _start_run(
                    owner=schedule.owner,
                    agent=schedule.agent,
                    content=schedule.message,
                    source=schedule.source,
                    title=schedule.name,
                    webhook_url=schedule.webhook_url,
                )
        except (ServiceError, ValueError) as refused:
            # The daily budget is used up, say: this due time passes, recorded.
            Schedule.objects.filter(pk=schedule_id).update(
                last_error=str(refused)[:300]
            )
            audit_append(
                kind=AuditKind.SCHEDULE_FIRED,
                actor="system",
                object_type="schedule",
                object_id=schedule_id,
                data={"skipped": "refused", "error": str(refused)[:300], **audit},
            )
            return None
        Schedule.objects.filter(pk=schedule_id).update(last_task=task, last_error="")
        audit_append(
            kind=AuditKind.SCHEDULE_FIRED,
            actor="system",
            task_id=task.pk,
            object_type="schedule",
            object_id=schedule_id,
            data=audit,
        )
    return task


# -- triggers --------------------------------------------------------------------


class TemplateError(ValueError):
    """A trigger's template that cannot be filled in (or a body that lacks a field)."""


def template_fields(template: str) -> list[str]:
    """The fields ``template`` names; only plain top-level names are allowed
    (no attribute, index or conversion: the body is the caller's)."""
    fields: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise TemplateError(
            f"The template does not parse: {exc}. Write {{field}} for a field of "
            "the body and {{{{ or }}}} for a brace."
        ) from exc
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise TemplateError(
                f"{{{name}}}: name a top-level field of the body, as {{title}}; "
                "attributes, indexes, conversions and formats are not allowed."
            )
        if name not in fields:
            fields.append(name)
    return fields


def trigger_message(template: str, body: Any) -> str:
    """The run's message: ``template`` filled with the body's fields."""
    fields = template_fields(template)
    if fields and not isinstance(body, dict):
        raise TemplateError("The body is a JSON object with the template's fields.")
    values = {}
    for name in fields:
        if name not in body:
            raise TemplateError(
                f"The body has no field {name!r}, which the template needs."
            )
        value = body[name]
        values[name] = (
            value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        )
    return template.format_map(values)


def trigger_save(*, trigger: Trigger, user: Any) -> str | None:
    """Validate and save ``trigger``; for a new one, its signing secret (shown
    once: only a sealed copy is kept). Audited."""
    template_fields(trigger.template)
    trigger.webhook_url = webhook_url_checked(trigger.webhook_url)
    secret = None
    adding = trigger._state.adding
    if adding:
        secret = secrets.token_hex(32)
        trigger.secret_sealed = seal(secret)
    with transaction.atomic():
        trigger.save()
        audit_append(
            kind=AuditKind.TRIGGER_CREATED if adding else AuditKind.TRIGGER_CHANGED,
            actor=user,
            object_type="trigger",
            object_id=trigger.pk,
            data={
                "name": trigger.name,
                "owner": trigger.owner.get_username(),
                "agent": trigger.agent.name,
                "enabled": trigger.enabled,
                "rate_per_min": trigger.rate_per_min,
                "webhook_url": trigger.webhook_url or None,
            },
        )
    return secret


def trigger_create(
    *,
    name: str,
    owner: Any,
    agent: Any,
    template: str,
    user: Any,
    rate_per_min: int = 10,
    webhook_url: str = "",
) -> tuple[Trigger, str]:
    """A new trigger and its signing secret (see :func:`trigger_save`)."""
    trigger = Trigger(
        name=name,
        owner=owner,
        agent=agent,
        template=template,
        rate_per_min=rate_per_min,
        webhook_url=webhook_url,
    )
    secret = trigger_save(trigger=trigger, user=user)
    assert secret is not None
    return trigger, secret


class TriggerRefused(ServiceError):
    """A trigger request refused: ``status`` is the HTTP answer."""

    def __init__(self, reason: Refusal, message: str, status: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.status = status


_STATUS = {
    Refusal.UNSIGNED: 401,
    Refusal.MALFORMED: 401,
    Refusal.STALE: 401,
    Refusal.FORGED: 401,
    Refusal.REPLAYED: 409,
    Refusal.RATE_LIMITED: 429,
    Refusal.DISABLED: 403,
}


def _refuse(trigger: Trigger, reason: Refusal, message: str, **data: Any) -> None:
    audit_append(
        kind=AuditKind.TRIGGER_REFUSED,
        actor="anonymous",
        object_type="trigger",
        object_id=trigger.pk,
        data={"reason": reason.value, **data},
    )
    raise TriggerRefused(reason, message, _STATUS[reason])


def trigger_verify(*, trigger: Trigger, body: bytes, header: str | None) -> None:
    """Check the signature, its age, that it was not seen before and the
    trigger's rate; each refusal is audited. The signature is remembered (in
    Redis, for twice the tolerance) only once everything else passed."""
    if not trigger.enabled:
        _refuse(trigger, Refusal.DISABLED, "This trigger is disabled.")
    secret = unseal(trigger.secret_sealed)
    tolerance = settings.REACH_TRIGGER_TOLERANCE_S
    try:
        if secret is None:
            raise SignatureRefused(
                Refusal.FORGED,
                "The trigger's secret cannot be read (the secrets key changed); "
                "create a new trigger.",
            )
        _, signature = verify(
            secret, body, header, now=time.time(), tolerance_s=tolerance
        )
    except SignatureRefused as refused:
        _refuse(trigger, refused.reason, refused.message)
    redis = runtime.redis_client()
    seen = redis.set(
        f"reach:trigger:seen:{trigger.pk}:{signature}", 1, nx=True, ex=2 * tolerance
    )
    if not seen:
        _refuse(
            trigger,
            Refusal.REPLAYED,
            "This signature was used already: sign each request anew.",
        )
    window = int(time.time() // 60)
    key = f"reach:trigger:rate:{trigger.pk}:{window}"
    pipe = redis.pipeline()
    pipe.incr(key)
    pipe.expire(key, 120)
    count, _ = pipe.execute()
    if count > trigger.rate_per_min:
        _refuse(
            trigger,
            Refusal.RATE_LIMITED,
            f"This trigger starts at most {trigger.rate_per_min} runs a minute.",
            count=count,
        )


def trigger_fire(*, trigger: Trigger, body: Any) -> Task:
    """Start the trigger's run with its message built from ``body`` (already
    verified). Raises :class:`TemplateError` for a body the template cannot
    use, :class:`ScheduleRefused` when the owner may not run the agent."""
    content = trigger_message(trigger.template, body)
    refusal = owner_refusal(trigger.owner, trigger.agent)
    if refusal is not None:
        _refuse_owner(trigger, refusal)
    with transaction.atomic():
        task = _start_run(
            owner=trigger.owner,
            agent=trigger.agent,
            content=content,
            source=trigger.source,
            title=trigger.name,
            webhook_url=trigger.webhook_url,
        )
        Trigger.objects.filter(pk=trigger.pk).update(last_fired_at=timezone.now())
        audit_append(
            kind=AuditKind.TRIGGER_FIRED,
            actor="system",
            task_id=task.pk,
            object_type="trigger",
            object_id=trigger.pk,
        )
    return task


def _refuse_owner(trigger: Trigger, refusal: str) -> None:
    audit_append(
        kind=AuditKind.TRIGGER_REFUSED,
        actor="system",
        object_type="trigger",
        object_id=trigger.pk,
        data={"reason": "owner", "error": refusal},
    )
    raise ScheduleRefused(refusal)
