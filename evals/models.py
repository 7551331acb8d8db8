"""Evaluations: suites of cases, reports of their runs, and each run's tasks.

A suite is a document (YAML or JSON, see :mod:`evals.suites`) stored as a row;
a report is one evaluation of a suite against an agent and model; a run is one
repetition of one case: a conversation of one or more real tasks.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from infra.model_fields import uuid_id
from registry.models import Agent
from runs.models import Conversation, Task


class Suite(models.Model):
    class Source(models.TextChoices):
        BUILTIN = "builtin"
        FILE = "file"
        UPLOAD = "upload"
        #: Made from recorded runs (evals.from_runs): grows a case per run added.
        RUNS = "runs"

    name = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    # The parsed document: what a report copies when it starts.
    document = models.JSONField()
    source = models.CharField(max_length=10, choices=Source.choices)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        permissions = [("run_eval", "Can run evaluations and read their reports")]

    def __str__(self) -> str:
        return self.name


class EvalReport(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    id = uuid_id()
    suite = models.ForeignKey(Suite, on_delete=models.PROTECT, related_name="reports")
    # The suite as it was when the report started (a later edit changes nothing).
    document = models.JSONField()
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    # The number of the agent's version its runs ran (registry.AgentVersion);
    # null for reports from before versions.
    agent_version = models.PositiveIntegerField(null=True, blank=True)
    model = models.CharField(max_length=200)
    runs_per_case = models.PositiveIntegerField(default=1)
    concurrency = models.PositiveIntegerField(default=4)
    status = models.CharField(
        max_length=10, choices=Status.choices, default=Status.QUEUED
    )
    error = models.TextField(blank=True)
    # The scored document (evals.scoring.report_document) once it is done.
    result = models.JSONField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.suite.name} on {self.agent.name}/{self.model}"

    @property
    def is_final(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)


class EvalRun(models.Model):
    """One repetition of one case (or its clean twin, ``variant='clean'``)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"

    report = models.ForeignKey(
        EvalReport, on_delete=models.CASCADE, related_name="runs"
    )
    case = models.CharField(max_length=100)
    variant = models.CharField(max_length=10, default="", blank=True)
    number = models.PositiveIntegerField()
    status = models.CharField(
        max_length=10, choices=Status.choices, default=Status.PENDING
    )
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The task of the turn being run (the last turn's once it is done).
    task = models.ForeignKey(
        Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    task_ids = models.JSONField(default=list, blank=True)
    turn = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    # What the scorer read (evals.scoring.observe), kept once the run is done.
    observed = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["case", "variant", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["report", "case", "variant", "number"], name="uniq_eval_run"
            )
        ]

    def __str__(self) -> str:
        return f"{self.case}{'@' + self.variant if self.variant else ''} #{self.number}"
