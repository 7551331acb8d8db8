"""Suites from runs: a recorded run (a trace, a labelled or thumbed-down run)
becomes an evaluation case, and a filter over runs becomes a suite.

A case from a run replays that run's conversation: its user turns, the results
its tools gave (so the case's writes answer as they did then, and nothing real
is written: an evaluation stubs every write anyway), the tools it called when
the run was right, and the answer that is right, from the review label when
there is one. The answer's figures become ``answer_contains``; the whole text is
the case's ``reference``, what a judge compares with.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from approvals.models import ApprovalRequest
from audit.services import audit_append
from evals import suites
from evals.models import Suite
from evals.services import EvalError, suite_store
from feedback.models import Feedback, ReviewLabel
from infra.errors import ErrorKind
from infra.runtime import redactor
from runs.models import Message, Step, Task
from runs.selectors import visible_tasks

#: How many runs one filter may turn into cases.
MAX_FILTERED = 200
#: Figures in a reference answer: numbers with their separators and decimals.
FIGURE = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?![\w])")
SUITE_FROM_RUNS = "evals.suite_from_runs"


@dataclass(frozen=True)
class RunFilter:
    """Which runs a suite is built from (every field optional)."""

    rating: str = ""  # "up" or "down": runs with such feedback
    verdict: str = ""  # "correct" or "incorrect": runs with such a label
    agent: str = ""
    since: dt.date | None = None
    until: dt.date | None = None

    def describe(self) -> str:
        parts = []
        if self.rating:
            parts.append(f"thumbs {self.rating}")
        if self.verdict:
            parts.append(f"labelled {self.verdict}")
        if self.agent:
            parts.append(f"agent {self.agent}")
        if self.since:
            parts.append(f"since {self.since.isoformat()}")
        if self.until:
            parts.append(f"until {self.until.isoformat()}")
        return ", ".join(parts) or "every finished run"


def parse_filter(data: Any) -> RunFilter:
    """A :class:`RunFilter` from a request's fields, with a clear refusal."""
    if not isinstance(data, dict):
        raise EvalError("filter: an object (rating, verdict, agent, since, until).")
    unknown = sorted(set(data) - {"rating", "verdict", "agent", "since", "until"})
    if unknown:
        raise EvalError(f"filter: unknown key(s) {', '.join(unknown)}.")
    rating = str(data.get("rating") or "")
    if rating and rating not in Feedback.Rating.values:
        raise EvalError("filter.rating: up or down.")
    verdict = str(data.get("verdict") or "")
    if verdict and verdict not in ReviewLabel.Verdict.values:
        raise EvalError("filter.verdict: correct or incorrect.")
    dates: dict[str, dt.date | None] = {}
    for key in ("since", "until"):
        value = data.get(key)
        if value in (None, ""):
            dates[key] = None
            continue
        try:
            dates[key] = dt.date.fromisoformat(str(value))
        except ValueError as exc:
            raise EvalError(f"filter.{key}: a date, YYYY-MM-DD.") from exc
    return RunFilter(
        rating=rating,
        verdict=verdict,
        agent=str(data.get("agent") or ""),
        since=dates["since"],
        until=dates["until"],
    )


def matching_runs(runs: QuerySet[Task], wanted: RunFilter) -> QuerySet[Task]:
    """The finished, non-evaluation runs of ``runs`` that ``wanted`` selects."""
    rows = runs.filter(
        status__in=[s for s in Task.Status.values if s not in Task.ACTIVE],
        eval_case__isnull=True,
        origin__isnull=True,
    )
    if wanted.rating:
        rows = rows.filter(
            Exists(Feedback.objects.filter(task=OuterRef("pk"), rating=wanted.rating))
        )
    if wanted.verdict:
        rows = rows.filter(
            Exists(
                ReviewLabel.objects.filter(task=OuterRef("pk"), verdict=wanted.verdict)
            )
        )
    if wanted.agent:
        rows = rows.filter(agent__name=wanted.agent)
    if wanted.since:
        rows = rows.filter(created_at__date__gte=wanted.since)
    if wanted.until:
        rows = rows.filter(created_at__date__lte=wanted.until)
    return rows.select_related("agent").order_by("created_at")


def requested_runs(user: Any, data: Any) -> list[Task]:
    """The runs a request names (``task``, ``tasks`` or ``filter``) among those
    ``user`` may read; a named run the user may not read is refused as unknown."""
    visible = visible_tasks(user).select_related("agent")
    if not isinstance(data, dict):
        data = {}
    if "filter" in data:
        wanted = parse_filter(data["filter"])
        rows = list(matching_runs(visible, wanted)[: MAX_FILTERED + 1])
        if len(rows) > MAX_FILTERED:
            raise EvalError(
                f"{wanted.describe()} matches more than {MAX_FILTERED} runs: narrow "
                "the filter (dates, agent)."
            )
        if not rows:
            raise EvalError(
                f"No run matches {wanted.describe()}, so no case was made.",
                ErrorKind.NOT_FOUND,
            )
        return rows
    ids = data.get("tasks") or ([data["task"]] if data.get("task") else [])
    if not isinstance(ids, list) or not ids:
        raise EvalError("Name the runs: task (an id), tasks (ids) or filter.")
    try:
        found = {str(t.pk): t for t in visible.filter(pk__in=[str(i) for i in ids])}
    except ValidationError as exc:
        raise EvalError("task: run ids (UUIDs).") from exc
    missing = [str(i) for i in ids if str(i) not in found]
    if missing:
        raise EvalError(f"No run {missing[0]} that you may read.", ErrorKind.NOT_FOUND)
    return [found[str(i)] for i in ids]


def case_id_for(task: Task) -> str:
    return f"run-{task.pk.hex[:12]}"


def case_from_run(task: Task) -> dict[str, Any]:
    """The case that replays ``task`` (see the module's docstring), redacted."""
    if task.is_eval or task.is_imported or task.status in Task.ACTIVE:
        raise EvalError(
            "Only a finished chat or API run becomes a case (not an evaluation "
            "run, an imported trace or a run still going).",
            ErrorKind.CONFLICT,
        )
    turns = list(
        Message.objects.filter(
            conversation_id=task.conversation_id,
            role=Message.Role.USER,
            created_at__lte=task.created_at,
        )
        .order_by("created_at", "id")
        .values_list("content", flat=True)
    )
    if not turns or turns[-1] != task.goal:
        turns.append(task.goal)
    earlier = Task.objects.filter(
        conversation_id=task.conversation_id, created_at__lte=task.created_at
    )
    results: dict[str, Any] = {}
    for tool, result in (
        Step.objects.filter(
            task__in=earlier,
            kind=Step.Kind.TOOL_CALL,
            status__in=[Step.Status.SUCCEEDED, Step.Status.CACHED],
        )
        .exclude(result=None)
        .order_by("task__created_at", "seq")
        .values_list("tool", "result")
    ):
        if tool:
            results[tool] = result  # the last answer of each tool
    called = list(
        task.steps.filter(
            kind=Step.Kind.TOOL_CALL,
            status__in=[Step.Status.SUCCEEDED, Step.Status.CACHED],
        )
        .order_by("seq")
        .values_list("tool", flat=True)
    )
    label = ReviewLabel.objects.filter(task=task).first()
    thumbs_down = Feedback.objects.filter(
        task=task, rating=Feedback.Rating.DOWN
    ).exists()
    right = label.verdict == ReviewLabel.Verdict.CORRECT if label else not thumbs_down
    reference = ""
    if label and label.corrected_answer:
        reference = label.corrected_answer
    elif right and task.final_answer:
        reference = task.final_answer
    expect: dict[str, Any] = {}
    if right and called:
        expect["tools"] = list(dict.fromkeys(t for t in called if t))
    figures = list(dict.fromkeys(FIGURE.findall(reference)))
    if figures:
        expect["answer_contains"] = figures
    if not expect:
        # Nothing known to be right: the case at least asks for an answer.
        expect["stop_reason"] = "final_answer"
    approvals = ApprovalRequest.objects.filter(task__in=earlier)
    rejected = approvals.filter(status=ApprovalRequest.Status.REJECTED).exists()
    why = (
        f"label {label.verdict}"
        if label
        else (
            "thumbs down, no label: add what is right" if thumbs_down else "unlabelled"
        )
    )
    case = {
        "id": case_id_for(task),
        "input": turns,
        "expect": expect,
        "approvals": "reject" if rejected or not approvals.exists() else "approve",
        "results": results,
        "reference": reference,
        "source": str(task.pk),
        "notes": f"From run {task.pk} of {task.agent.name} on "
        f"{timezone.localtime(task.created_at):%Y-%m-%d} ({why}).",
    }
    return redactor().data(case)


def suite_add_runs(
    *, name: str, tasks: list[Task], actor: Any, description: str = ""
) -> tuple[Suite, int]:
    """Add a case per run of ``tasks`` to the suite ``name`` (made when new; a
    case of the same run is replaced). Returns the suite and the cases added.

    Only a suite made from runs (or uploaded) grows this way: a built-in suite
    is its file. All the runs must be of one agent, the suite's.
    """
    if not tasks:
        raise EvalError("No run matches, so no case was made.", ErrorKind.NOT_FOUND)
    if not suites.NAME.match(name or ""):
        raise EvalError(
            "name: letters, digits, '-', '_' or '.' (at most 100), starting with a "
            "letter or digit."
        )
    agents = {t.agent.name for t in tasks}
    existing = Suite.objects.filter(name=name).first()
    if existing is not None and existing.source in (
        Suite.Source.BUILTIN,
        Suite.Source.FILE,
    ):
        raise EvalError(
            f"The suite {name!r} is read from a file: add the case to the file, or "
            "give the new suite another name.",
            ErrorKind.CONFLICT,
        )
    document = (
        dict(existing.document)
        if existing
        else {
            "name": name,
            "description": description or "Cases made from recorded runs.",
            "agent": next(iter(agents)),
            "runs": 1,
            "clean_baseline": False,
            "cases": [],
        }
    )
    if agents != {document["agent"]}:
        raise EvalError(
            f"The suite {name!r} evaluates the {document['agent']} agent; these runs "
            f"are of {', '.join(sorted(agents))}.",
            ErrorKind.CONFLICT,
        )
    cases = {c["id"]: c for c in document["cases"]}
    for task in tasks:
        cases[case_id_for(task)] = case_from_run(task)
    document["cases"] = list(cases.values())
    try:
        document = suites.validate(document)
    except suites.SuiteError as exc:
        raise EvalError(str(exc)) from exc
    suite = suite_store(document, Suite.Source.RUNS)
    audit_append(
        kind=SUITE_FROM_RUNS,
        actor=actor,
        object_type="suite",
        object_id=suite.name,
        data={"runs": [str(t.pk) for t in tasks], "cases": len(document["cases"])},
    )
    return suite, len(tasks)
