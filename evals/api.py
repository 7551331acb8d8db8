"""``/api/evals/``: start an evaluation of a suite, list them, read one."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from evals import from_runs, services
from evals import tasks as celery_tasks
from evals.models import EvalReport, Suite
from infra.api.common import paginate
from infra.errors import ErrorKind


def _int(data: Any, key: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise services.EvalError(f"{key}: a whole number.")
    return value


def _str(data: Any, key: str) -> str | None:
    value = data.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise services.EvalError(f"{key}: a string.")
    return value


def start_report(user: Any, data: Any) -> EvalReport:
    """Validate a start request (the API's and the page's) and enqueue its driver.

    Nothing is stored unless the report starts: who may start one is checked
    before the request is read, and a suite sent with it is saved in the
    report's transaction.
    """
    return start_reports(user, data)[0]


def start_reports(user: Any, data: Any) -> tuple[EvalReport, EvalReport | None]:
    """:func:`start_report`, and with ``compare`` (another version of the agent:
    a label such as ``production``, or ``v3``) a second report of the same
    cases on that version, to compare with (:func:`services.report_changes`)."""
    services.eval_access_check(user)
    if not isinstance(data, dict):
        raise services.EvalError("Send an object: suite (a name) or document.")
    with transaction.atomic():
        suite = _requested_suite(data)
        report = services.report_create(
            suite=suite,
            user=user,
            agent=_str(data, "agent"),
            model=_str(data, "model"),
            runs=_int(data, "runs"),
            concurrency=_int(data, "concurrency") or 4,
        )
        baseline = None
        if (other := _str(data, "compare")) is not None:
            baseline = services.report_create_compared(
                report=report, baseline=other, user=user, model=_str(data, "model")
            )
        for started in (report, baseline):
            if started is not None:
                _enqueue(started)
    return report, baseline


def _enqueue(report: EvalReport) -> None:
    transaction.on_commit(lambda: celery_tasks.drive.delay(str(report.pk)))


def _requested_suite(data: dict[str, Any]) -> Suite:
    if data.get("document") is not None:
        return services.suite_upload(data["document"])
    name = _str(data, "suite")
    if name is None:
        raise services.EvalError("suite: the name of a suite (or send document).")
    if "/" in name or name.endswith((".yaml", ".yml", ".json")):
        # Files are the command's: the web process reads no paths it is sent.
        raise services.EvalError("suite: a suite's name, not a path.")
    return services.suite_resolve(name)


class EvalList(APIView):
    """``GET`` the reports, newest first; ``POST`` starts one (201)."""

    @extend_schema(responses={200: {"type": "array", "items": {"type": "object"}}})
    def get(self, request: Request) -> Response:
        if not services.can_run_evals(request.user):
            raise PermissionDenied("Only operators read evaluations.")
        reports = EvalReport.objects.select_related("suite", "agent")
        page, headers = paginate(request, reports)
        return Response([services.report_brief(r) for r in page], headers=headers)

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={201: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT},
    )
    def post(self, request: Request) -> Response:
        # An EvalError answers its kind's status (infra.api.errors).
        report, baseline = start_reports(request.user, request.data)
        document = services.report_view(report)
        if baseline is not None:
            document["compared_with"] = str(baseline.pk)
        return Response(document, status=status.HTTP_201_CREATED)


class EvalDetail(APIView):
    """``GET /api/evals/{id}/``: the report (live while it runs);
    ``?compare=ID`` adds the cases whose success rate dropped since that one."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT, 404: OpenApiTypes.OBJECT})
    def get(self, request: Request, report_id: str) -> Response:
        if not services.can_run_evals(request.user):
            raise PermissionDenied("Only operators read evaluations.")
        report = services.report_find(report_id)
        if report is None:
            raise services.EvalError("No such evaluation.", ErrorKind.NOT_FOUND)
        document = services.report_view(report)
        baseline_id = request.query_params.get("compare")
        if baseline_id:
            baseline = services.report_find(baseline_id)
            if baseline is None:
                raise services.EvalError(
                    f"No evaluation {baseline_id} to compare.", ErrorKind.NOT_FOUND
                )
            document["regressions"] = services.report_compare(report, baseline)
            document["changes"] = services.report_changes(report, baseline)
            document["compared_with"] = str(baseline.pk)
        return Response(document)


class SuiteRuns(APIView):
    """``POST /api/evals/suites/{name}/runs/``: add recorded runs to a suite as
    cases (evals.from_runs), by id or by a filter; the suite is made when new."""

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={
            200: OpenApiTypes.OBJECT,
            201: OpenApiTypes.OBJECT,
            400: OpenApiTypes.OBJECT,
            403: OpenApiTypes.OBJECT,
            404: OpenApiTypes.OBJECT,
            409: OpenApiTypes.OBJECT,
        },
    )
    def post(self, request: Request, name: str) -> Response:
        if not services.can_run_evals(request.user):
            raise PermissionDenied("Only operators build evaluation suites.")
        data = request.data if isinstance(request.data, dict) else {}
        tasks = from_runs.requested_runs(request.user, data)
        created = not Suite.objects.filter(name=name).exists()
        suite, added = from_runs.suite_add_runs(
            name=name,
            tasks=tasks,
            actor=request.user,
            description=str(data.get("description") or ""),
        )
        return Response(
            {
                "suite": suite.name,
                "added": added,
                "cases": [c["id"] for c in suite.document["cases"]],
            },
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )
