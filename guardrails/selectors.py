"""Numbers of guardrail trips, for the stats page."""

from __future__ import annotations

from collections import Counter

from django.db.models import QuerySet

from engine.guards import trips_in
from engine.spec import StepKind
from runs.models import Step, Task


def trip_counts(tasks: QuerySet[Task]) -> list[tuple[str, str, str, int]]:
    """Trips over ``tasks``: (agent/guardrail, stage, action, count), most first.
    Guardrail steps (input, answer) and tool calls a tool_result guardrail
    annotated both count."""
    steps = (
        Step.objects.filter(task__in=tasks, kind=StepKind.GUARDRAIL)
        | Step.objects.filter(
            task__in=tasks, kind=StepKind.TOOL_CALL, detail__has_key="guardrail"
        )
    ).values_list("task__agent__name", "detail")
    counts: Counter[tuple[str, str, str]] = Counter()
    for agent, detail in steps:
        for trip in trips_in(detail or {}):
            name = f"{agent}/{trip.get('name')}"
            counts[(name, str(trip.get("stage")), str(trip.get("action")))] += 1
    return [(*key, n) for key, n in counts.most_common()]
