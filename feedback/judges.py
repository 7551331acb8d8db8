"""Judges: a model scores an answer against a rubric, in a fixed JSON shape.

A judge is asked with the question, the answer, the tool calls the run made
(with their results, shortened) and, when the case has one, the reference
answer; it answers ``{"score": 0..1, "reason": "..."}`` (``response_format``
JSON schema, which the built-in model follows under its grammar). A reply that
is not that shape, or an endpoint that is down, gives a verdict with no score
and the reason in ``error``: recorded, never raised, so nothing else fails.

Online scores: :func:`judge_sampled` (the beat's ``feedback.judge_sampled``)
judges a fixed share of the finished runs of the agents a judge is attached
to, after they end and off their path (a run never waits for its judge).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Avg, Count, Exists, OuterRef, Q, QuerySet
from django.db.models.functions import TruncDate
from django.utils import timezone

from audit.services import audit_append
from engine.model_client import ModelError
from engine.spec import FINAL_TASK_STATUSES
from engine.structured import complete_json, response_formats
from feedback.models import FeedbackAuditKind, Judge, JudgeVerdict, ReviewLabel
from infra.runtime import model_client, redactor
from runs.models import Step, Task

log = logging.getLogger(__name__)

#: The shape every judge answers in.
VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string"},
    },
    "required": ["score", "reason"],
    "additionalProperties": False,
}


#: What a judge is asked for, in turn, until the endpoint takes one: OpenAI's
#: json_schema; then json_object with the schema beside it (llama-cpp-python's
#: server, the built-in model, which follows it under a grammar); then plain
#: text (the shape is still parsed and checked).
RESPONSE_FORMATS = response_formats(VERDICT_SCHEMA, "verdict", strict=True)
#: How much of each tool result the judge sees.
RESULT_CHARS = 600
MAX_CALLS_SHOWN = 12
#: Online judging: how many runs one tick judges, and how far back it looks.
ONLINE_BATCH = 20
ONLINE_LOOKBACK = dt.timedelta(days=1)

SYSTEM = (
    "You are a strict reviewer of an AI assistant's answers. Score the answer "
    "against the rubric from 0 (fails it) to 1 (fully meets it). Judge only what "
    "is shown: the question, the tool calls the assistant made with their results, "
    "and its answer. Reply with JSON only: "
    '{"score": <number from 0 to 1>, "reason": "<one or two sentences>"}.'
)


@dataclass(frozen=True)
class Verdict:
    score: float | None
    reason: str
    error: str = ""

    def passed(self, threshold: float) -> bool | None:
        return None if self.score is None else self.score >= threshold


def _short(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def judge_messages(
    judge: Judge,
    *,
    question: str,
    answer: str,
    calls: Sequence[Mapping[str, Any]] = (),
    reference: str = "",
) -> list[dict[str, str]]:
    shown = [
        f"- {c['tool']}({_short(c.get('arguments') or {}, 300)}) -> "
        f"{_short(c.get('result'), RESULT_CHARS)}"
        for c in list(calls)[:MAX_CALLS_SHOWN]
    ]
    parts = [
        f"Rubric:\n{judge.rubric.strip()}",
        f"Question:\n{question}",
        "Tool calls:\n" + ("\n".join(shown) if shown else "(none)"),
    ]
    if reference:
        parts.append(f"Reference answer (what is right):\n{reference}")
    parts.append(f"Answer to score:\n{answer or '(no answer)'}")
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def parse_verdict(content: str | None) -> Verdict:
    """The judge's reply as a :class:`Verdict`; a malformed one says why."""
    text = (content or "").strip()
    match = _OBJECT.search(text)
    try:
        data = json.loads(match.group(0) if match else text)
    except ValueError:
        return Verdict(
            None, "", f"The judge answered no JSON verdict: {_short(text, 200)!r}"
        )
    if not isinstance(data, dict):
        return Verdict(
            None, "", f"The judge's verdict is not an object: {_short(text, 200)!r}"
        )
    score, reason = data.get("score"), data.get("reason")
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        return Verdict(
            None, "", f"The judge's verdict has no numeric score: {_short(text, 200)!r}"
        )
    if not 0 <= float(score) <= 1:
        return Verdict(None, "", f"The judge's score {score} is outside 0 to 1.")
    if not isinstance(reason, str) or not reason.strip():
        return Verdict(float(score), "", "The judge gave a score without a reason.")
    return Verdict(float(score), reason.strip())


def ask(
    judge: Judge,
    *,
    question: str,
    answer: str,
    calls: Sequence[Mapping[str, Any]] = (),
    reference: str = "",
) -> Verdict:
    """Ask ``judge`` about one answer; never raises for the judge's own failures."""
    messages = judge_messages(
        judge, question=question, answer=answer, calls=calls, reference=reference
    )
    try:
        content = complete_json(
            model_client(),
            messages,
            model=judge.model or settings.OPENAI_MODEL,
            formats=RESPONSE_FORMATS,
        )
    except ModelError as failure:
        return Verdict(None, "", f"The judge's model failed: {failure}")
    return parse_verdict(content)


def run_calls(task: Task) -> list[dict[str, Any]]:
    """The tool calls of ``task`` as a judge sees them (redacted)."""
    rows = task.steps.filter(kind=Step.Kind.TOOL_CALL).order_by("seq")
    return [
        redactor().data({"tool": s.tool, "arguments": s.arguments, "result": s.result})
        for s in rows.only("tool", "arguments", "result")
    ]


def judge_task(
    judge: Judge, task: Task, *, origin: str, reference: str = ""
) -> JudgeVerdict:
    """Judge ``task``'s answer and store the verdict (one per run and judge: a
    second ask of the same pair returns the first verdict)."""
    existing = JudgeVerdict.objects.filter(task=task, judge=judge).first()
    if existing is not None:
        return existing
    redact = redactor()
    verdict = ask(
        judge,
        question=redact.text(task.goal),
        answer=redact.text(task.final_answer or ""),
        calls=run_calls(task),
        reference=redact.text(reference),
    )
    try:
        with transaction.atomic():
            row = JudgeVerdict.objects.create(
                task=task,
                judge=judge,
                origin=origin,
                score=verdict.score,
                passed=verdict.passed(judge.pass_threshold),
                reason=verdict.reason,
                error=verdict.error,
                model=judge.model or settings.OPENAI_MODEL,
            )
            audit_append(
                kind=FeedbackAuditKind.JUDGED,
                actor=f"judge:{judge.name}",
                task_id=task.pk,
                object_type="judge_verdict",
                object_id=row.pk,
                data={
                    "judge": judge.name,
                    "origin": origin,
                    "score": verdict.score,
                    "error": bool(verdict.error),
                },
            )
    except IntegrityError:  # judged meanwhile by another process: theirs stands
        return JudgeVerdict.objects.get(task=task, judge=judge)
    return row


def _sampled(task_id: Any, judge: Judge) -> bool:
    digest = hashlib.sha256(f"{judge.pk}:{task_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < judge.sample_rate


def due_for(judge: Judge, *, now: dt.datetime | None = None) -> QuerySet[Task]:
    """The finished runs of ``judge``'s agents it has not judged, newest first
    (sampling is applied by the caller)."""
    now = now or timezone.now()
    return (
        Task.objects.filter(
            agent__in=judge.agents.all(),
            status__in=FINAL_TASK_STATUSES,
            eval_case__isnull=True,
            origin__isnull=True,
            finished_at__gte=max(judge.created_at, now - ONLINE_LOOKBACK),
        )
        .exclude(Exists(JudgeVerdict.objects.filter(task=OuterRef("pk"), judge=judge)))
        .order_by("-finished_at")
    )


def judge_sampled(*, batch: int = ONLINE_BATCH) -> int:
    """One tick of online scoring: judge up to ``batch`` sampled runs; returns
    how many were judged."""
    judged = 0
    for judge in Judge.objects.filter(
        sample_rate__gt=0, agents__isnull=False
    ).distinct():
        for task in due_for(judge).iterator(chunk_size=200):
            if judged >= batch:
                return judged
            if not _sampled(task.pk, judge):
                continue
            judge_task(judge, task, origin=JudgeVerdict.Origin.ONLINE)
            judged += 1
    return judged


@dataclass(frozen=True)
class Agreement:
    """How often a judge's pass/fail matches people's labels on the same runs."""

    compared: int
    agreed: int

    @property
    def rate(self) -> float | None:
        return round(self.agreed / self.compared, 4) if self.compared else None


def agreement(verdicts: QuerySet[JudgeVerdict]) -> Agreement:
    """Among ``verdicts`` with a score, those whose run has a review label: how
    many say the same (passed and correct, or failed and incorrect)."""
    labels = dict(
        ReviewLabel.objects.filter(
            task__in=verdicts.filter(passed__isnull=False).values("task")
        ).values_list("task_id", "verdict")
    )
    compared = agreed = 0
    for task_id, passed in verdicts.filter(passed__isnull=False).values_list(
        "task_id", "passed"
    ):
        verdict = labels.get(task_id)
        if verdict is None:
            continue
        compared += 1
        agreed += int(passed == (verdict == ReviewLabel.Verdict.CORRECT))
    return Agreement(compared, agreed)


@dataclass(frozen=True)
class OnlineScore:
    """A judge's scores of one day's sampled runs (the stats page)."""

    judge: str
    day: str
    judged: int
    mean_score: float | None
    passed: int


def online_scores(tasks: QuerySet[Task]) -> list[OnlineScore]:
    """The online verdicts on ``tasks`` per judge and day, oldest day first."""
    rows = (
        JudgeVerdict.objects.filter(task__in=tasks, origin=JudgeVerdict.Origin.ONLINE)
        .exclude(score=None)
        .annotate(day=TruncDate("created_at"))
        .values("judge__name", "day")
        .annotate(
            n=Count("id"), mean=Avg("score"), ok=Count("id", filter=Q(passed=True))
        )
        .order_by("day", "judge__name")
    )
    return [
        OnlineScore(
            judge=str(r["judge__name"]),
            day=r["day"].isoformat(),
            judged=int(r["n"]),
            mean_score=round(float(r["mean"]), 3) if r["mean"] is not None else None,
            passed=int(r["ok"]),
        )
        for r in rows
    ]


def agreement_per_judge(tasks: QuerySet[Task]) -> list[tuple[str, Agreement]]:
    """Each judge's agreement with the review labels over ``tasks``."""
    names = (
        JudgeVerdict.objects.filter(task__in=tasks)
        .values_list("judge__name", flat=True)
        .distinct()
        .order_by("judge__name")
    )
    return [
        (name, agreement(JudgeVerdict.objects.filter(task__in=tasks, judge__name=name)))
        for name in names
    ]
