"""What people say of a run: a user's thumbs on an answer, a reviewer's label.

Both outlive nothing they describe: a purged run (traces' retention) takes its
feedback with it, while a label keeps the run's id, goal and answer as they were
when it was labelled (``task`` becomes null), so an export still says what was
judged.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from runs.models import Task


class FeedbackAuditKind(models.TextChoices):
    """The audit events of this app (``audit.AuditEvent.kind``)."""

    GIVEN = "feedback.given"
    CHANGED = "feedback.changed"
    WITHDRAWN = "feedback.withdrawn"
    LABELLED = "review.labelled"
    RELABELLED = "review.relabelled"
    EXPORTED = "review.exported"


class Feedback(models.Model):
    """A user's thumbs up or down on one run's answer, with an optional comment.

    One per run and author: giving it again changes it.
    """

    class Rating(models.TextChoices):
        UP = "up", "Helpful"
        DOWN = "down", "Not helpful"

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="feedback")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="feedback"
    )
    rating = models.CharField(max_length=4, choices=Rating.choices)
    comment = models.TextField(blank=True, max_length=2000)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-updated_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["task", "user"], name="uniq_feedback_author"
            )
        ]
        indexes = [models.Index(fields=["rating", "-updated_at"])]

    def __str__(self) -> str:
        return f"{self.rating} on {self.task_id} by {self.user_id}"


class ReviewLabel(models.Model):
    """A reviewer's verdict on a run (the review queue): correct or not, the
    answer it should have given, notes. One per run; labelling again changes it."""

    class Verdict(models.TextChoices):
        CORRECT = "correct", "Correct"
        INCORRECT = "incorrect", "Incorrect"

    task = models.OneToOneField(
        Task, null=True, on_delete=models.SET_NULL, related_name="review_label"
    )
    # The run as it was labelled: kept when the run is purged.
    task_ref = models.UUIDField(db_index=True)
    agent_name = models.CharField(max_length=64)
    goal = models.TextField()
    answer = models.TextField(blank=True)
    verdict = models.CharField(max_length=10, choices=Verdict.choices)
    corrected_answer = models.TextField(blank=True)
    notes = models.TextField(blank=True)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        on_delete=models.SET_NULL,
        related_name="review_labels",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-updated_at"]
        constraints = [
            models.UniqueConstraint(fields=["task_ref"], name="uniq_review_label_run")
        ]
        permissions = [("review_runs", "Can label runs in the review queue")]

    def __str__(self) -> str:
        return f"{self.verdict}: {self.task_ref}"
