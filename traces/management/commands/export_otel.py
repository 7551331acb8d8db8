"""``manage.py export_otel --since …``: send past runs to the OTLP collector.

Finished runs are exported as they finish (traces/otel.py); this sends the ones
that finished before an endpoint was configured, or while the collector was down.
Span ids are fixed by the task, so a run sent twice is one trace, not two.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from engine.spec import FINAL_TASK_STATUSES
from runs.models import Task
from traces import otel
from traces.views import parse_day

_AGO = re.compile(r"^(\d+)([mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


def parse_since(value: str) -> dt.datetime | None:
    """A moment given as ``YYYY-MM-DD``, an ISO date and time, or ``30m``/``6h``/``7d``
    ago."""
    ago = _AGO.match(value.strip())
    if ago:
        return timezone.now() - dt.timedelta(**{_UNITS[ago[2]]: int(ago[1])})
    day = parse_day(value)
    if day is not None:
        return day
    try:
        moment = parse_datetime(value)
    except ValueError:
        return None
    if moment is not None and timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment


class Command(BaseCommand):
    help = (
        "Export finished runs as OpenTelemetry traces (GenAI semantic conventions "
        f"v{otel.SEMCONV_VERSION}) to the collector of OTEL_EXPORTER_OTLP_ENDPOINT."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tasks", nargs="*", help="task ids (default: all finished)")
        parser.add_argument(
            "--since",
            help="runs finished at or after: YYYY-MM-DD, an ISO time, or 30m/6h/7d ago",
        )
        parser.add_argument("--until", help="runs finished before: same forms")
        parser.add_argument("--agent", help="only runs of this agent profile")

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.REACH_OTEL_ENABLED:
            raise CommandError(
                "No collector: set OTEL_EXPORTER_OTLP_ENDPOINT (or "
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)."
            )
        # Imported traces ran elsewhere: that instance exported them.
        tasks = Task.objects.filter(
            status__in=[s.value for s in FINAL_TASK_STATUSES], origin__isnull=True
        ).select_related("agent")
        if options["tasks"]:
            tasks = tasks.filter(pk__in=options["tasks"])
        if options["agent"]:
            tasks = tasks.filter(agent__name=options["agent"])
        bounds = (("since", "finished_at__gte"), ("until", "finished_at__lt"))
        for name, lookup in bounds:
            if options[name]:
                moment = parse_since(options[name])
                if moment is None:
                    raise CommandError(
                        f"--{name} takes YYYY-MM-DD, an ISO time, or 30m/6h/7d."
                    )
                tasks = tasks.filter(**{lookup: moment})
        sent = otel.export_tasks(tasks.order_by("finished_at").iterator(chunk_size=100))
        delivered = otel.flush()
        counts = otel.counts()
        otel.shutdown()
        self.stdout.write(
            f"Exported {sent.traces} traces ({sent.spans} spans): "
            f"{counts.exported} spans accepted, {counts.failed} not delivered."
        )
        if counts.failed or not delivered:
            raise CommandError("The collector did not take every span (see the log).")
