"""The evaluations pages: start one, watch it, read and compare reports."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from evals import from_runs, services, suites
from evals.api import start_reports
from evals.models import EvalReport, Suite
from infra.errors import ErrorKind
from registry.models import Agent
from registry.versions import version_resolve
from runs.selectors import visible_tasks


def _operator(request: HttpRequest) -> None:
    if not services.can_run_evals(request.user):
        raise PermissionDenied("Only operators run evaluations.")


@login_required
@require_http_methods(["GET", "POST"])
def eval_list(request: HttpRequest) -> HttpResponse:
    _operator(request)
    error = ""
    form: dict[str, Any] = {"concurrency": 4}
    if request.method == "POST":
        form = request.POST.dict()
        data: dict[str, Any] = {
            k: form.get(k) or None for k in ("suite", "agent", "model", "compare")
        }
        upload = request.FILES.get("file")
        if form.get("version"):
            # A label (candidate) or a number (v3) of the agent chosen (blank:
            # the suite's).
            data["agent"] = f"{data['agent'] or ''}@{form['version']}"
        try:
            for key in ("runs", "concurrency"):
                if form.get(key):
                    data[key] = int(form[key])
            if upload is not None:
                data["document"] = upload.read().decode("utf-8")
            report, baseline = start_reports(request.user, data)
        except ValueError:
            error = "runs and concurrency are whole numbers; a suite file is UTF-8."
        except services.EvalError as exc:
            error = str(exc)
        else:
            if baseline is not None:
                return redirect(
                    f"{reverse('eval', args=[report.pk])}?compare={baseline.pk}"
                )
            return redirect("eval", report.pk)
    services.suites_sync_builtin()
    reports = EvalReport.objects.select_related("suite", "agent")[:50]
    return render(
        request,
        "evals/list.html",
        {
            "suites": Suite.objects.all(),
            "agents": Agent.objects.order_by("name"),
            "reports": [services.report_brief(r) for r in reports],
            "error": error,
            "form": form,
            "runs_suites": _runs_suites(),
        },
        status=400 if error else 200,
    )


@login_required
def eval_detail(request: HttpRequest, report_id: Any) -> HttpResponse:
    _operator(request)
    report = services.report_find(report_id)
    if report is None:
        raise Http404("No such evaluation.")
    document = services.report_view(report)
    baseline = None
    regressions = None
    changes = None
    if request.GET.get("compare"):
        baseline = services.report_find(request.GET["compare"])
        if baseline is None:
            raise Http404("No evaluation to compare with.")
        regressions = services.report_compare(report, baseline)
        changes = services.report_changes(report, baseline)
    others = (
        EvalReport.objects.filter(suite=report.suite, status=EvalReport.Status.DONE)
        .exclude(pk=report.pk)
        .select_related("agent")[:20]
    )
    return render(
        request,
        "evals/detail.html",
        {
            "report": report,
            "doc": document,
            "baseline": baseline,
            "regressions": regressions,
            "changes": changes,
            "others": others,
            "running": not report.is_final
            or (baseline is not None and not baseline.is_final),
            "may_promote": _may_promote(request, report, baseline),
        },
    )


def _may_promote(
    request: HttpRequest, report: EvalReport, baseline: EvalReport | None
) -> bool:
    """Offer "promote" on a comparison of two versions of one agent, to those
    who may change agents, when the report's version is not production yet."""
    if baseline is None or baseline.agent_id != report.agent_id:
        return False
    if report.agent_version is None or not request.user.has_perm(
        "registry.change_agent"
    ):
        return False
    running = version_resolve(report.agent)
    return running is None or running.number != report.agent_version


@login_required
@require_http_methods(["POST"])
def eval_promote(request: HttpRequest, report_id: Any) -> HttpResponse:
    """Label the version ``report`` ran ``production`` (the compare page's
    button): chats run it from the next message on. Audited."""
    _operator(request)
    report = services.report_find(report_id)
    if report is None:
        raise Http404("No such evaluation.")
    try:
        label = services.report_promote(report=report, user=request.user)
    except services.EvalError as exc:
        if exc.kind is ErrorKind.FORBIDDEN:
            raise PermissionDenied(str(exc)) from exc
        messages.error(request, str(exc))
    else:
        messages.success(
            request,
            f"{report.agent.name}: production is now v{label.version.number}.",
        )
    target = reverse("eval", args=[report.pk])
    compare = request.POST.get("compare", "")
    return redirect(f"{target}?compare={compare}" if compare else target)


def _runs_suites() -> list[Suite]:
    """The suites a run can be added to (made from runs, or uploaded)."""
    return list(
        Suite.objects.filter(source__in=[Suite.Source.RUNS, Suite.Source.UPLOAD])
    )


@login_required
@require_http_methods(["GET", "POST"])
def eval_from_run(request: HttpRequest, task_id: Any) -> HttpResponse:
    """One run as a case: its preview, and a form that adds it to a suite."""
    _operator(request)
    task = (
        visible_tasks(request.user).select_related("agent").filter(pk=task_id).first()
    )
    if task is None:
        raise Http404("No such run.")
    error = ""
    name = request.POST.get("suite", "").strip() if request.method == "POST" else ""
    try:
        case = from_runs.case_from_run(task)
    except services.EvalError as exc:
        case, error = None, str(exc)
    if request.method == "POST" and case is not None:
        try:
            suite, _ = from_runs.suite_add_runs(
                name=name, tasks=[task], actor=request.user
            )
        except services.EvalError as exc:
            error = str(exc)
        else:
            messages.success(
                request,
                f"Added case {case['id']} to the suite {suite.name} "
                f"({len(suite.document['cases'])} cases).",
            )
            return redirect("evals")
    return render(
        request,
        "evals/from_run.html",
        {
            "task": task,
            "case": suites.dumps_yaml(case) if case else "",
            "error": error,
            "name": name or f"{task.agent.name}-from-runs",
            "suites": _runs_suites(),
        },
    )


@login_required
@require_http_methods(["POST"])
def eval_from_runs(request: HttpRequest) -> HttpResponse:
    """A filter's runs as cases of a suite (the form on the evaluations page)."""
    _operator(request)
    fields = {k: request.POST.get(k, "") for k in ("rating", "verdict", "agent")}
    fields |= {k: request.POST.get(k) or None for k in ("since", "until")}
    try:
        tasks = from_runs.requested_runs(request.user, {"filter": fields})
        suite, added = from_runs.suite_add_runs(
            name=request.POST.get("suite", "").strip(), tasks=tasks, actor=request.user
        )
    except services.EvalError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request,
            f"Added {added} case{'s' if added != 1 else ''} to the suite {suite.name} "
            f"({len(suite.document['cases'])} in all).",
        )
    return redirect("evals")
