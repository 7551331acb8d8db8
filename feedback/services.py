"""Feedback on answers and labels from the review queue: who may give them, and
the queue of runs to label.

Every write is audited (ids, ratings and verdicts; never the comment's or the
answer's text, which the trace holds under its own retention).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from audit.services import audit_append
from engine.spec import FINAL_TASK_STATUSES, StopReason
from feedback.models import Feedback, FeedbackAuditKind, ReviewLabel
from infra.errors import ErrorKind, ServiceError
from runs.models import Task

#: Stop reasons that mean the run hit one of its limits (the review queue's
#: second reason to show a run).
LIMIT_STOPS = (
    StopReason.MAX_STEPS,
    StopReason.MAX_TOOL_CALLS,
    StopReason.REPEATED_CALL,
    StopReason.TOOL_ERROR_LIMIT,
    StopReason.TIME_BUDGET,
    StopReason.TOKEN_BUDGET,
    StopReason.COST_BUDGET,
)

MAX_COMMENT_CHARS = 2000
REVIEW_PERMISSION = "feedback.review_runs"


class FeedbackRefused(ServiceError):
    """Feedback or a label that may not be given (why is the message)."""


def can_review(user: Any) -> bool:
    """Reviewers (the permission) and admins label runs."""
    return bool(
        user.is_authenticated
        and (user.is_superuser or user.has_perm(REVIEW_PERMISSION))
    )


def _check_answered(task: Task, *, eval_allowed: bool = False) -> None:
    if task.is_eval and not eval_allowed:
        raise FeedbackRefused(
            "An evaluation run is scored by its suite, not by feedback.",
            ErrorKind.CONFLICT,
        )
    if task.status not in FINAL_TASK_STATUSES:
        raise FeedbackRefused(
            "The run has not finished yet: rate its answer once it has one.",
            ErrorKind.CONFLICT,
        )


def give_feedback(*, user: Any, task: Task, rating: str, comment: str = "") -> Feedback:
    """Record (or change) ``user``'s thumbs on ``task``'s answer.

    Only the run's owner rates it: the answer was written for them. A comment
    is optional; rating again replaces the rating and the comment.
    """
    if task.owner_id != user.pk:
        raise FeedbackRefused(
            "Only the person the answer was written for can rate it.",
            ErrorKind.FORBIDDEN,
        )
    if rating not in Feedback.Rating.values:
        raise FeedbackRefused(
            f"rating is one of {', '.join(Feedback.Rating.values)}, not {rating!r}."
        )
    comment = (comment or "").strip()
    if len(comment) > MAX_COMMENT_CHARS:
        raise FeedbackRefused(
            f"A comment holds at most {MAX_COMMENT_CHARS} characters "
            f"({len(comment)} given)."
        )
    _check_answered(task)
    now = timezone.now()
    with transaction.atomic():
        row, created = Feedback.objects.select_for_update().get_or_create(
            task=task,
            user=user,
            defaults={
                "rating": rating,
                "comment": comment,
                "created_at": now,
                "updated_at": now,
            },
        )
        if not created:
            if row.rating == rating and row.comment == comment:
                return row
            before = row.rating
            row.rating, row.comment, row.updated_at = rating, comment, now
            row.save(update_fields=["rating", "comment", "updated_at"])
        audit_append(
            kind=FeedbackAuditKind.GIVEN if created else FeedbackAuditKind.CHANGED,
            actor=user,
            task_id=task.pk,
            object_type="feedback",
            object_id=row.pk,
            data={
                "rating": rating,
                "commented": bool(comment),
                **({} if created else {"was": before}),
            },
        )
    return row


def withdraw_feedback(*, user: Any, task: Task) -> bool:
    """Take back ``user``'s feedback on ``task``; False when there was none."""
    with transaction.atomic():
        row = Feedback.objects.filter(task=task, user=user).first()
        if row is None:
            return False
        audit_append(
            kind=FeedbackAuditKind.WITHDRAWN,
            actor=user,
            task_id=task.pk,
            object_type="feedback",
            object_id=row.pk,
            data={"was": row.rating},
        )
        row.delete()
    return True


def feedback_on(task: Task) -> dict[str, Any]:
    """What the trace page shows of a run: its thumbs (with comments) and its
    review label."""
    return {
        "thumbs": list(task.feedback.select_related("user")),
        "verdicts": list(task.verdicts.select_related("judge")),
        "label": ReviewLabel.objects.select_related("reviewer")
        .filter(task=task)
        .first(),
    }


def feedback_by_task(user: Any, task_ids: list[Any]) -> dict[str, Feedback]:
    """``user``'s own feedback on each of ``task_ids`` that has some (the chat)."""
    rows = Feedback.objects.filter(user=user, task_id__in=task_ids)
    return {str(row.task_id): row for row in rows}


def sample_rate() -> float:
    """The share of other finished runs the queue shows (REACH_REVIEW_SAMPLE_RATE)."""
    return float(settings.REACH_REVIEW_SAMPLE_RATE)


def _sampled(task_id: Any, rate: float) -> bool:
    """Whether a run falls in the queue's sample: a fixed share of runs, the same
    runs on every read (a hash of the id, not a coin toss per page load)."""
    if rate <= 0:
        return False
    digest = hashlib.sha256(str(task_id).encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < rate


def review_reason(task: Task, *, thumbs_down: bool) -> str | None:
    """Why ``task`` is in the review queue, or None when it is not."""
    if thumbs_down:
        return "thumbs down"
    if task.stop_reason in LIMIT_STOPS:
        return f"stopped on a limit ({task.stop_reason})"
    if _sampled(task.pk, sample_rate()):
        return "sample"
    return None


def review_queue(*, limit: int = 50, scan: int = 2000) -> list[tuple[Task, str]]:
    """Unlabelled finished runs to label, thumbs-downs first, then runs stopped on
    a limit, then the sample of the rest; newest first within each.

    The sample is taken over the newest ``scan`` finished runs, so the page
    reads a bounded number of rows however many runs there are.
    """
    base = (
        Task.objects.filter(status__in=FINAL_TASK_STATUSES, eval_case__isnull=True)
        .exclude(Exists(ReviewLabel.objects.filter(task=OuterRef("pk"))))
        .annotate(
            thumbs_down=Exists(
                Feedback.objects.filter(
                    task=OuterRef("pk"), rating=Feedback.Rating.DOWN
                )
            )
        )
        .select_related("agent", "owner")
    )
    flagged = list(
        base.filter(Q(thumbs_down=True) | Q(stop_reason__in=LIMIT_STOPS)).order_by(
            "-thumbs_down", "-created_at"
        )[:limit]
    )
    queue = [(t, review_reason(t, thumbs_down=t.thumbs_down) or "") for t in flagged]
    if len(queue) < limit:
        seen = {t.pk for t, _ in queue}
        for task in base.filter(thumbs_down=False).order_by("-created_at")[:scan]:
            if task.pk in seen or task.stop_reason in LIMIT_STOPS:
                continue
            if _sampled(task.pk, sample_rate()):
                queue.append((task, "sample"))
                if len(queue) >= limit:
                    break
    return queue


def label_run(
    *,
    reviewer: Any,
    task: Task,
    verdict: str,
    corrected_answer: str = "",
    notes: str = "",
) -> ReviewLabel:
    """Record (or change) the review label of ``task``."""
    if not can_review(reviewer):
        raise FeedbackRefused(
            "Labelling runs needs the “Can label runs in the review queue” permission.",
            ErrorKind.FORBIDDEN,
        )
    if verdict not in ReviewLabel.Verdict.values:
        raise FeedbackRefused(
            f"verdict is one of {', '.join(ReviewLabel.Verdict.values)}, "
            f"not {verdict!r}."
        )
    # An evaluation run may be labelled: how often a judge agrees with people.
    _check_answered(task, eval_allowed=True)
    now = timezone.now()
    fields = {
        "task": task,
        "agent_name": task.agent.name,
        "goal": task.goal,
        "answer": task.final_answer or "",
        "verdict": verdict,
        "corrected_answer": (corrected_answer or "").strip(),
        "notes": (notes or "").strip(),
        "reviewer": reviewer,
        "updated_at": now,
    }
    with transaction.atomic():
        row, created = ReviewLabel.objects.update_or_create(
            task_ref=task.pk,
            defaults=fields,
            create_defaults=fields | {"created_at": now},
        )
        audit_append(
            kind=FeedbackAuditKind.LABELLED
            if created
            else FeedbackAuditKind.RELABELLED,
            actor=reviewer,
            task_id=task.pk,
            object_type="review_label",
            object_id=row.pk,
            data={"verdict": verdict, "corrected": bool(fields["corrected_answer"])},
        )
    return row


def labels(*, since: Any = None) -> QuerySet[ReviewLabel]:
    rows = ReviewLabel.objects.select_related("reviewer").order_by("created_at", "pk")
    if since is not None:
        rows = rows.filter(updated_at__gte=since)
    return rows


def label_payload(row: ReviewLabel) -> dict[str, Any]:
    return {
        "task": str(row.task_ref),
        "purged": row.task_id is None,
        "agent": row.agent_name,
        "goal": row.goal,
        "answer": row.answer,
        "verdict": row.verdict,
        "corrected_answer": row.corrected_answer,
        "notes": row.notes,
        "reviewer": row.reviewer.get_username() if row.reviewer else None,
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
    }


def labels_json_lines(*, actor: Any, since: Any = None) -> Iterator[str]:
    """Every label as one JSON object per line (the export), audited once."""
    rows = list(labels(since=since))
    audit_append(
        kind=FeedbackAuditKind.EXPORTED,
        actor=actor,
        object_type="review_label",
        data={"labels": len(rows)},
    )
    for row in rows:
        yield json.dumps(label_payload(row), ensure_ascii=False) + "\n"


def feedback_payload(row: Feedback) -> dict[str, Any]:
    return {
        "task": str(row.task_id),
        "rating": row.rating,
        "comment": row.comment,
        "user": row.user.get_username(),
        "created_at": row.created_at.isoformat(),
        "updated_at": row.updated_at.isoformat(),
    }


def feedback_per_agent(tasks: QuerySet[Task]) -> list[tuple[str, int, int, int]]:
    """(agent, thumbs up, thumbs down, labelled incorrect) over ``tasks``, the
    agents with most feedback first (the stats page)."""
    counts: dict[str, list[int]] = {}
    rows = (
        Feedback.objects.filter(task__in=tasks)
        .values("task__agent__name", "rating")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in rows:
        cell = counts.setdefault(str(row["task__agent__name"]), [0, 0, 0])
        cell[0 if row["rating"] == Feedback.Rating.UP else 1] += int(row["n"])
    wrong = (
        ReviewLabel.objects.filter(
            task__in=tasks, verdict=ReviewLabel.Verdict.INCORRECT
        )
        .values("agent_name")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in wrong:
        counts.setdefault(str(row["agent_name"]), [0, 0, 0])[2] += int(row["n"])
    return sorted(
        ((name, up, down, bad) for name, (up, down, bad) in counts.items()),
        key=lambda r: (-(r[1] + r[2] + r[3]), r[0]),
    )
