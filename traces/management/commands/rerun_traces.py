"""``manage.py rerun_traces``: the deterministic re-run over many finished runs.

One line per task, then a summary; exits non-zero when any run diverges — the
regression check after changing tools or policies.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from engine.spec import FINAL_TASK_STATUSES
from runs.models import Task
from traces.replay import task_rerun
from traces.views import parse_day


class Command(BaseCommand):
    help = (
        "Re-run finished traces through the current engine (nothing is executed) "
        "and report the first divergence of each."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tasks", nargs="*", help="task ids (default: all finished)")
        parser.add_argument("--agent", help="only runs of this agent profile")
        parser.add_argument("--tool", help="only runs that called this tool")
        parser.add_argument("--since", help="only runs created on or after YYYY-MM-DD")
        parser.add_argument("--until", help="only runs created on or before YYYY-MM-DD")
        parser.add_argument("--limit", type=int, help="at most N runs, newest first")
        parser.add_argument(
            "--no-imported", action="store_true", help="leave imported traces out"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tasks = Task.objects.filter(
            status__in=[s.value for s in FINAL_TASK_STATUSES]
        ).select_related("agent")
        if options["tasks"]:
            tasks = tasks.filter(pk__in=options["tasks"])
        if options["agent"]:
            tasks = tasks.filter(agent__name=options["agent"])
        if options["tool"]:
            tasks = tasks.filter(steps__tool=options["tool"]).distinct()
        for name, end in (("since", False), ("until", True)):
            if options[name]:
                day = parse_day(options[name], end=end)
                if day is None:
                    raise CommandError(f"--{name} takes a date as YYYY-MM-DD.")
                lookup = "created_at__lte" if end else "created_at__gte"
                tasks = tasks.filter(**{lookup: day})
        if options["no_imported"]:
            tasks = tasks.filter(origin__isnull=True)
        tasks = tasks.order_by("-created_at")
        if options["limit"]:
            tasks = tasks[: options["limit"]]
        checked = matched = diverged = errors = 0
        for task in tasks.iterator(chunk_size=100):
            checked += 1
            try:
                result = task_rerun(task=task)
            except Exception as exc:  # noqa: BLE001 - report it and go on
                errors += 1
                self.stdout.write(f"{task.pk} ERROR {exc.__class__.__name__}: {exc}")
                continue
            if result.matches:
                matched += 1
                self.stdout.write(f"{task.pk} match ({len(result.steps)} steps)")
                continue
            diverged += 1
            divergence = result.divergence
            assert divergence is not None
            where = (
                "at the end" if divergence.seq is None else f"at step {divergence.seq}"
            )
            self.stdout.write(
                f"{task.pk} DIVERGED {where}: expected "
                f"{json.dumps(divergence.expected, ensure_ascii=False)} got "
                f"{json.dumps(divergence.got, ensure_ascii=False)}"
            )
        summary = (
            f"{checked} checked, {matched} matched, {diverged} diverged, "
            f"{errors} errors"
        )
        self.stdout.write(summary)
        if diverged or errors:
            raise CommandError(f"Re-run found differences: {summary}.")
