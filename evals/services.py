"""Running a suite: suites in the database, reports, and the driver.

The driver starts each run's turns as real tasks (the worker runs them through
the engine and policy like any chat), plays the case's simulated approver on
the requests they park, and scores each run when its last turn finishes. It
keeps nothing in memory that the database does not have: a driver started
again on a running report carries on from its rows (:func:`report_drive`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery import current_app
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from approvals.models import ApprovalDecision, ApprovalRequest
from approvals.services import (
    DecisionError,
    approval_decide,
    can_decide,
    decide_refusal,
)
from evals import scoring, suites
from evals.models import EvalReport, EvalRun, Suite
from feedback import judges
from feedback.models import Judge, JudgeVerdict
from infra.errors import ErrorKind, ServiceError
from registry import versions
from registry.models import Agent, AgentLabel, AgentVersion
from runs import services as runs
from runs.models import Task
from runs.selectors import default_agent

RUN_PERMISSION = "evals.run_eval"
#: What a run may take beyond its agent's time budget before it is given up.
RUN_GRACE_S = 120.0
EVAL_RUNNER = "eval-runner"
SIMULATED_REASON = "rejected by the evaluation's simulated approver"


class EvalError(ServiceError):
    """A refusal of an evaluation: invalid input unless its ``kind`` says otherwise
    (forbidden, not found)."""


def can_run_evals(user: Any) -> bool:
    return bool(user.is_authenticated and user.has_perm(RUN_PERMISSION))


# -- suites ------------------------------------------------------------------------


def suites_sync_builtin() -> list[Suite]:
    """Load the built-in suite files into the database (new or changed ones)."""
    synced = []
    for path in suites.builtin_paths().values():
        synced.append(suite_store(suites.parse(path.read_text()), Suite.Source.BUILTIN))
    return synced


def suite_resolve(name_or_path: str) -> Suite:
    """A suite file, a built-in suite's name, or a suite stored earlier."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml", ".json") or path.is_file():
        if not path.is_file():
            raise EvalError(f"No suite file at {name_or_path}.", ErrorKind.NOT_FOUND)
        try:
            document = suites.parse(path.read_text(encoding="utf-8"))
        except suites.SuiteError as exc:
            raise EvalError(f"{path}: {exc}") from exc
        return suite_store(document, Suite.Source.FILE)
    if name_or_path in suites.builtin_paths():
        suites_sync_builtin()
    suite = Suite.objects.filter(name=name_or_path).first()
    if suite is None:
        known = sorted(
            set(Suite.objects.values_list("name", flat=True))
            | set(suites.builtin_paths())
        )
        raise EvalError(
            f"No suite named {name_or_path!r} (known: {', '.join(known)}).",
            ErrorKind.NOT_FOUND,
        )
    return suite


def suite_upload(document: Any) -> Suite:
    """A suite sent as an object or as YAML/JSON text."""
    try:
        parsed = (
            suites.parse(document)
            if isinstance(document, str)
            else suites.validate(document)
        )
    except suites.SuiteError as exc:
        raise EvalError(str(exc)) from exc
    return suite_store(parsed, Suite.Source.UPLOAD)


def suite_store(document: dict[str, Any], source: str) -> Suite:
    suite, created = Suite.objects.get_or_create(
        name=document["name"],
        defaults={
            "document": document,
            "description": document["description"],
            "source": source,
        },
    )
    if not created and (suite.document != document or suite.source != source):
        suite.document = document
        suite.description = document["description"]
        suite.source = source
        suite.updated_at = timezone.now()
        suite.save()
    return suite


# -- reports -----------------------------------------------------------------------


def eval_access_check(user: Any) -> None:
    """Raise :class:`EvalError` (forbidden) unless ``user`` may start an evaluation."""
    if not can_run_evals(user):
        raise EvalError(
            "You do not have permission to run evaluations.", ErrorKind.FORBIDDEN
        )
    if not can_decide(user):
        # The simulated approver decides as the person who started the report.
        raise EvalError(
            "Running an evaluation decides its approvals as you: you need the "
            "permission to decide approvals too.",
            ErrorKind.FORBIDDEN,
        )
    missing = decide_refusal(user)
    if missing is not None:
        # Refused now rather than by its first approval, mid-run.
        raise EvalError(
            "Running an evaluation decides its approvals as you. " + missing.message,
            ErrorKind.FORBIDDEN,
        )


def report_create(
    *,
    suite: Suite,
    user: Any,
    agent: str | None = None,
    model: str | None = None,
    runs: int | None = None,
    concurrency: int = 4,
) -> EvalReport:
    """A report of ``suite`` with its runs planned (none started)."""
    eval_access_check(user)
    document = suite.document
    if agent and agent.startswith("@"):
        # A version of the suite's agent (``@candidate``).
        named = document.get("agent") or getattr(default_agent(), "name", "")
        agent = f"{named}{agent}"
    profile, version = _agent_version(agent or document.get("agent"))
    if runs is not None and not 1 <= runs <= suites.MAX_RUNS:
        raise EvalError(f"runs: a whole number from 1 to {suites.MAX_RUNS}.")
    if not 1 <= concurrency <= 64:
        raise EvalError("concurrency: a whole number from 1 to 64.")
    named = {case_judge(document, c) for c in document["cases"]} - {""}
    missing = sorted(
        named - set(Judge.objects.filter(name__in=named).values_list("name", flat=True))
    )
    if missing:
        raise EvalError(
            f"The suite names the judge {missing[0]!r}, and there is none: add it "
            "under Admin → Judges, or drop the name."
        )
    per_case = runs or document["runs"]
    with transaction.atomic():
        report = EvalReport.objects.create(
            suite=suite,
            document=document,
            agent=profile,
            agent_version=version.number if version is not None else None,
            model=model
            or (version.snapshot.get("model") if version else profile.model)
            or settings.OPENAI_MODEL,
            runs_per_case=per_case,
            concurrency=concurrency,
            created_by=user,
        )
        planned = [
            EvalRun(report=report, case=case["id"], variant=variant, number=number)
            for case in document["cases"]
            for variant in _variants(document, case)
            for number in range(1, per_case + 1)
        ]
        EvalRun.objects.bulk_create(planned)
    return report


def _agent_version(name: str | None) -> tuple[Agent, AgentVersion | None]:
    """The agent and version ``name`` means: ``NAME``, ``NAME@label`` or
    ``NAME@v3`` (:func:`registry.versions.version_ref`); no name: the default
    agent. Without ``@`` the version a chat would run."""
    if not name:
        profile = default_agent()
        if profile is None:
            raise EvalError("No agent exists.")
        return profile, versions.version_resolve(profile)
    if "@" not in name:
        profile = Agent.objects.filter(name=name).first()
        if profile is None:
            raise EvalError(f"No agent named {name!r}.")
        return profile, versions.version_resolve(profile)
    try:
        return versions.version_ref(name)
    except versions.VersionError as exc:
        raise EvalError(" ".join(exc.messages)) from exc


def report_version(report: EvalReport) -> AgentVersion | None:
    """The agent version ``report`` runs (None: a report from before versions)."""
    if report.agent_version is None:
        return None
    return AgentVersion.objects.filter(
        agent_id=report.agent_id, number=report.agent_version
    ).first()


def report_create_compared(
    *, report: EvalReport, baseline: str, user: Any, model: str | None = None
) -> EvalReport:
    """A report of the same suite and runs on another version of ``report``'s
    agent (``baseline``: a label, ``v3``, or ``NAME@label``); ``model`` as the
    first was given it (None: each version's own model)."""
    ref = baseline if "@" in baseline else f"{report.agent.name}@{baseline}"
    return report_create(
        suite=report.suite,
        user=user,
        agent=ref,
        model=model,
        runs=report.runs_per_case,
        concurrency=report.concurrency,
    )


def _variants(document: dict[str, Any], case: dict[str, Any]) -> list[str]:
    if case.get("injection") and document.get("clean_baseline"):
        return ["", "clean"]
    return [""]


def _cases(report: EvalReport) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in report.document["cases"]}


# -- the driver --------------------------------------------------------------------


def report_drive(
    report: EvalReport,
    *,
    poll_s: float = 0.2,
    advance: Callable[[Task], Any] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> EvalReport:
    """Run ``report`` to its end and store its scored document.

    ``advance`` drives a task in-process after each change (what the worker's
    ``advance`` would run); by default the worker does it and the driver polls.
    """
    claimed = EvalReport.objects.filter(
        pk=report.pk, status=EvalReport.Status.QUEUED
    ).update(status=EvalReport.Status.RUNNING)
    report.refresh_from_db()
    if not claimed and report.status != EvalReport.Status.RUNNING:
        return report
    cases = _cases(report)
    try:
        while True:
            plan = list(report.runs.select_related("task"))
            active = [r for r in plan if r.status == EvalRun.Status.RUNNING]
            room = report.concurrency - len(active)
            for run in [r for r in plan if r.status == EvalRun.Status.PENDING][
                : max(0, room)
            ]:
                # Claimed first: a second driver (a redelivered drive) skips it.
                if EvalRun.objects.filter(
                    pk=run.pk, status=EvalRun.Status.PENDING
                ).update(status=EvalRun.Status.RUNNING):
                    _turn_start(report, run, cases[run.case])
                    active.append(run)
            for run in active:
                _run_tend(report, run, cases[run.case])
            done = sum(1 for r in plan if r.status == EvalRun.Status.DONE)
            if on_progress is not None:
                on_progress(done, len(plan))
            if done == len(plan):
                break
            if advance is not None:
                for run in active:
                    if run.task is not None and not run.task.is_final:
                        advance(run.task)
            else:
                time.sleep(poll_s)
        report.result = report_document(report)
        report.status = EvalReport.Status.DONE
    except Exception as exc:  # noqa: BLE001 - recorded on the report, then raised
        report.status = EvalReport.Status.FAILED
        report.error = f"{exc.__class__.__name__}: {exc}"[:2000]
        report.finished_at = timezone.now()
        report.save(update_fields=["status", "error", "finished_at"])
        raise
    report.finished_at = timezone.now()
    report.save(update_fields=["status", "result", "finished_at"])
    return report


def _turn_start(report: EvalReport, run: EvalRun, case: dict[str, Any]) -> None:
    if run.conversation_id is None:
        run.conversation = runs.conversation_create(
            owner=eval_runner(), agent=report.agent
        )
        type(run.conversation).objects.filter(pk=run.conversation.pk).update(
            is_eval=True
        )
        run.started_at = timezone.now()
    injection = case.get("injection") if run.variant != "clean" else None
    task = runs.task_start(
        conversation=run.conversation,
        content=case["input"][run.turn],
        model=report.model,
        agent_version=report_version(report),
        eval_case={
            "report": str(report.pk),
            "case": case["id"],
            "variant": run.variant,
            "run": run.number,
            "results": case.get("results") or {},
            "injection": injection,
        },
    )
    run.task = task
    run.task_ids = [*run.task_ids, str(task.pk)]
    run.status = EvalRun.Status.RUNNING
    run.save()


def _run_tend(report: EvalReport, run: EvalRun, case: dict[str, Any]) -> None:
    """Move one running run on: approve or reject, next turn, or score it."""
    assert run.task is not None
    task = Task.objects.get(pk=run.task.pk)
    run.task = task
    if task.status == Task.Status.WAITING_APPROVAL:
        if case["approvals"] == suites.Approver.LEAVE:
            _run_finish(run, note="left waiting for approval", case=case)
            with contextlib.suppress(runs.TaskFinal):
                runs.task_cancel(task=task, user=report.created_by)
            return
        _simulate_approver(report, task, case["approvals"])
        return
    if task.is_final:
        if run.turn + 1 < len(case["input"]):
            run.turn += 1
            _turn_start(report, run, case)
        else:
            _run_finish(run, case=case)
        return
    if _overdue(report, run):
        _run_finish(run, note="timed out", case=case)
        with contextlib.suppress(runs.TaskFinal):
            runs.task_cancel(task=task, user=report.created_by)


def eval_runner() -> Any:
    """The account eval runs belong to: never the person who started the report,
    who decides their approvals (nobody decides on their own task's request).
    It has no usable password, so nobody logs in as it."""
    users = get_user_model().objects
    user = users.filter(username=EVAL_RUNNER).first()
    if user is None:
        user = users.create_user(username=EVAL_RUNNER, password=None)
    return user


def _simulate_approver(report: EvalReport, task: Task, approver: str) -> None:
    decision = (
        ApprovalDecision.APPROVE
        if approver == suites.Approver.APPROVE
        else ApprovalDecision.REJECT
    )
    for approval in ApprovalRequest.objects.filter(
        task=task, status=ApprovalRequest.Status.PENDING
    ):
        try:
            approval_decide(
                approval=approval,
                user=report.created_by,
                decision=decision,
                reason="" if decision == ApprovalDecision.APPROVE else SIMULATED_REASON,
            )
        except DecisionError as exc:
            if exc.kind is not ErrorKind.CONFLICT:  # decided meanwhile: fine
                raise EvalError(f"The simulated approver was refused: {exc}") from exc


def _overdue(report: EvalReport, run: EvalRun) -> bool:
    if run.started_at is None:
        return False
    budget = report.agent.time_budget_s * max(1, len(run.task_ids)) + RUN_GRACE_S
    return (timezone.now() - run.started_at).total_seconds() > budget


def _run_finish(
    run: EvalRun, *, note: str = "", case: dict[str, Any] | None = None
) -> None:
    tasks = list(Task.objects.filter(pk__in=run.task_ids).order_by("created_at"))
    run.observed = scoring.observe(tasks, note=note)
    judge_name = case_judge(run.report.document, case) if case else ""
    if judge_name and tasks:
        run.observed["judge"] = _judged(judge_name, tasks[-1], case or {})
    run.status = EvalRun.Status.DONE
    run.save()


def case_judge(document: dict[str, Any], case: dict[str, Any]) -> str:
    """The judge that scores ``case``: its own, else the suite's; "" for none."""
    return str(case.get("judge") or document.get("judge") or "")


def _judged(name: str, task: Task, case: dict[str, Any]) -> dict[str, Any]:
    """A judge's verdict on a run's last task, as the run's observed document
    keeps it (a judge that fails leaves its reason, and the exact checks stand)."""
    judge = Judge.objects.filter(name=name).first()
    if judge is None:
        return {
            "judge": name,
            "score": None,
            "passed": None,
            "reason": "",
            "error": f"No judge named {name!r} (it was deleted).",
        }
    verdict = judges.judge_task(
        judge,
        task,
        origin=JudgeVerdict.Origin.EVAL,
        reference=case.get("reference", ""),
    )
    return {
        "judge": name,
        "score": verdict.score,
        "passed": verdict.passed,
        "reason": verdict.reason,
        "error": verdict.error,
    }


# -- documents ---------------------------------------------------------------------


def report_document(report: EvalReport) -> dict[str, Any]:
    """The report as the API, the page and ``eval --json`` show it."""
    cases = _cases(report)
    plan = list(report.runs.all())
    lines = []
    for case in report.document["cases"]:
        for variant in _variants(report.document, case):
            observed = [
                r.observed
                for r in plan
                if r.case == case["id"] and r.variant == variant and r.observed
            ]
            if observed:
                lines.append(
                    scoring.case_document(cases[case["id"]], variant, observed)
                )
    return {
        **_head(report),
        "progress": {
            "done": sum(1 for r in plan if r.status == EvalRun.Status.DONE),
            "total": len(plan),
        },
        "cases": lines,
        "summary": {**scoring.summary(lines), **_judge_agreement(lines)},
        "error": report.error,
    }


def _judge_agreement(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Where people labelled the runs a judge scored (the review queue), how often
    the judge agreed with them; nothing when no case has a judge."""
    if not any(line.get("judge") for line in lines):
        return {}
    tasks = [t for line in lines if line.get("judge") for t in line["tasks"]]
    found = judges.agreement(JudgeVerdict.objects.filter(task_id__in=tasks))
    return {
        "judge_agreement": {
            "compared": found.compared,
            "agreed": found.agreed,
            "rate": found.rate,
        }
    }


def _head(report: EvalReport) -> dict[str, Any]:
    """What a report ran, its status and times (fresh from the row)."""
    return {
        "id": str(report.pk),
        "status": report.status,
        "suite": report.suite.name,
        "agent": report.agent.name,
        "agent_version": report.agent_version,
        "model": report.model,
        "runs_per_case": report.runs_per_case,
        "created_at": report.created_at.isoformat(),
        "finished_at": report.finished_at.isoformat() if report.finished_at else None,
    }


def report_view(report: EvalReport) -> dict[str, Any]:
    """The stored document once done; the live one while it runs."""
    if report.result is not None:
        return {**report.result, **_head(report)}
    return report_document(report)


def report_compare(report: EvalReport, baseline: EvalReport) -> list[dict[str, Any]]:
    return scoring.regressions(report_view(report), report_view(baseline))


def report_changes(report: EvalReport, baseline: EvalReport) -> list[dict[str, Any]]:
    """Per case, better or worse than ``baseline``, with both intervals
    (:func:`evals.scoring.case_changes`)."""
    return scoring.case_changes(report_view(report), report_view(baseline))


def report_promote(
    *, report: EvalReport, user: Any, label: str = versions.PRODUCTION
) -> AgentLabel:
    """Move ``label`` to the version ``report`` ran (the compare page's button);
    for those who may change agents. Audited."""
    if not user.has_perm("registry.change_agent"):
        raise EvalError(
            "Moving a label changes what chats run: you need the permission to "
            "change agents.",
            ErrorKind.FORBIDDEN,
        )
    version = report_version(report)
    if version is None:
        raise EvalError("This report ran no recorded version of its agent.")
    return versions.label_move(
        agent=report.agent, name=label, version=version, user=user
    )


def report_brief(report: EvalReport) -> dict[str, Any]:
    """A report's line in a list: what it ran and its headline figure."""
    summary = (report.result or {}).get("summary") or {}
    return {**_head(report), "success_rate": summary.get("success_rate")}


def report_find(report_id: Any) -> EvalReport | None:
    """A report by id; None for a malformed or unknown id."""
    try:
        return EvalReport.objects.filter(pk=report_id).first()
    except (ValueError, ValidationError):
        return None


def workers_alive(timeout_s: float = 2.0) -> bool:
    """Whether a Celery worker answers a ping (the runs need one)."""
    try:
        return bool(current_app.control.ping(timeout=timeout_s))
    except Exception:  # noqa: BLE001 - no broker is no worker
        return False
