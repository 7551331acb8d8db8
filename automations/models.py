"""Schedules (runs at due times) and triggers (runs from signed webhooks)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from automations.cadence import Cadence
from infra.model_fields import uuid_id
from registry.models import Agent


class Schedule(models.Model):
    """A message sent to an agent at due times, as its owner."""

    class Missed(models.TextChoices):
        """What a tick after a gap (downtime) does with the due times it missed."""

        #: Nothing: the next run is at the next due time.
        SKIP = "skip", "skip missed runs"
        #: One run now, however many were missed.
        RUN_ONCE = "run_once", "run once"

    id = uuid_id()
    name = models.CharField(max_length=100)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="schedules",
        help_text="Runs are this user's, with this user's permissions.",
    )
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    message = models.TextField(help_text="What the run is asked, each time.")
    cron = models.CharField(
        max_length=100,
        blank=True,
        help_text="Five fields: minute hour day-of-month month day-of-week "
        "('0 9 * * 1-5': 09:00 on weekdays). Or give an interval.",
    )
    interval_s = models.PositiveIntegerField(
        "interval (seconds)", null=True, blank=True
    )
    time_zone = models.CharField(
        max_length=64,
        default="UTC",
        help_text="The cron expression's time zone (an IANA name: Europe/Paris).",
    )
    missed = models.CharField(
        "missed runs", max_length=10, choices=Missed.choices, default=Missed.SKIP
    )
    webhook_url = models.CharField(
        max_length=2000,
        blank=True,
        help_text="Where each run's outcome is posted when it ends or waits for "
        "an approval (signed with the completion webhook secret). http(s); a "
        "private or loopback address only when REACH_INTERNAL_HOSTS lists it.",
    )
    paused = models.BooleanField(default=False)
    paused_reason = models.CharField(max_length=300, blank=True)
    #: The due time the next tick claims (a guarded UPDATE moves it on).
    next_due_at = models.DateTimeField(null=True, blank=True, db_index=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    last_task = models.ForeignKey(
        "runs.Task", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    last_error = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        indexes = [models.Index(fields=["paused", "next_due_at"])]
        permissions = [
            ("manage_all_schedules", "Can see and change every user's schedules")
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def source(self) -> str:
        """What its runs carry in ``Task.source``."""
        return f"schedule:{self.pk}"

    def cadence(self) -> Cadence:
        return Cadence(
            cron=self.cron.strip(),
            interval_s=self.interval_s,
            timezone=self.time_zone,
            anchor=self.created_at,
        )

    @property
    def cadence_text(self) -> str:
        if self.interval_s:
            return f"every {self.interval_s} s"
        return f"{self.cron} ({self.time_zone})"


class Trigger(models.Model):
    """A URL that starts a run when a body signed with its secret is posted."""

    id = uuid_id()
    name = models.CharField(max_length=100)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="triggers",
        help_text="Runs are this user's, with this user's permissions.",
    )
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    template = models.TextField(
        help_text="The run's message: {field} is the JSON body's top-level field "
        "(objects and lists as JSON), {{ and }} are braces.",
    )
    #: The signing secret, encrypted at rest (registry.secrets.seal); shown once.
    secret_sealed = models.TextField(editable=False)
    enabled = models.BooleanField(default=True)
    rate_per_min = models.PositiveIntegerField(
        "runs per minute", default=10, help_text="Over it: 429."
    )
    webhook_url = models.CharField(
        max_length=2000,
        blank=True,
        help_text="Where each run's outcome is posted when it ends or waits for "
        "an approval (signed with the completion webhook secret). http(s); a "
        "private or loopback address only when REACH_INTERNAL_HOSTS lists it.",
    )
    last_fired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def source(self) -> str:
        return f"trigger:{self.pk}"
