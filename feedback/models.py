"""What people say of a run: a user's thumbs on an answer, a reviewer's label.

Both outlive nothing they describe: a purged run (traces' retention) takes its
feedback with it, while a label keeps the run's id, goal and answer as they were
when it was labelled (``task`` becomes null), so an export still says what was
judged.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from registry.models import Agent
from runs.models import Task


class FeedbackAuditKind(models.TextChoices):
    """The audit events of this app (``audit.AuditEvent.kind``)."""

    GIVEN = "feedback.given"
    CHANGED = "feedback.changed"
    WITHDRAWN = "feedback.withdrawn"
    LABELLED = "review.labelled"
    RELABELLED = "review.relabelled"
    EXPORTED = "review.exported"
    JUDGED = "judge.verdict"
    JUDGE_CHANGED = "judge.changed"


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


class Judge(models.Model):
    """A model that scores answers against a rubric: named by evaluation suites
    and cases, and attached to agents to score a sample of their runs online."""

    name = models.SlugField(max_length=64, unique=True)
    rubric = models.TextField(
        help_text="What a good answer does, in plain words: the judge scores the "
        "answer from 0 to 1 against it."
    )
    model = models.CharField(
        max_length=200,
        blank=True,
        help_text="A model at the configured endpoint (the built-in one included); "
        "blank means OPENAI_MODEL.",
    )
    pass_threshold = models.FloatField(
        default=0.5,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="A score at or above it passes.",
    )
    agents = models.ManyToManyField(
        Agent,
        blank=True,
        related_name="judges",
        help_text="Online scores: finished runs of these agents are judged (a "
        "sample of them, below), off the run's path.",
    )
    sample_rate = models.FloatField(
        default=0.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="The share of those runs judged (0 to 1; 0: none).",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class JudgeVerdict(models.Model):
    """One judge's verdict on one run: a score and its reason, or why there is
    none (the judge's endpoint was down, it answered no verdict)."""

    class Origin(models.TextChoices):
        EVAL = "eval", "evaluation"
        ONLINE = "online", "online sample"

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="verdicts")
    judge = models.ForeignKey(Judge, on_delete=models.CASCADE, related_name="verdicts")
    origin = models.CharField(max_length=10, choices=Origin.choices)
    score = models.FloatField(null=True, blank=True)
    passed = models.BooleanField(null=True, blank=True)
    reason = models.TextField(blank=True)
    error = models.TextField(blank=True)
    model = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["task", "judge"], name="uniq_verdict_run")
        ]

    def __str__(self) -> str:
        return f"{self.judge} on {self.task_id}: {self.score}"
