"""Approvals API: the queue and decisions."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals.models import ApprovalRequest
from approvals.payloads import approval_payload
from approvals.services import DecisionError, approval_decide, can_decide
from runs.api.views import paginate, redacted
from runs.permissions import can_audit


def _approvals() -> QuerySet[ApprovalRequest]:
    return ApprovalRequest.objects.select_related(
        "task__agent", "requested_by", "decided_by", "step"
    ).prefetch_related("votes__user")


class ApprovalList(APIView):
    def get(self, request: Request) -> Response:
        user = request.user
        if not (can_decide(user) or can_audit(user)):
            raise PermissionDenied("Only approvers and auditors see approvals.")
        approvals = _approvals().order_by("requested_at")
        wanted = request.query_params.get("status")
        if wanted:
            approvals = approvals.filter(status=wanted)
        page, headers = paginate(request, approvals)
        return Response([redacted(approval_payload(a)) for a in page], headers=headers)


class ApprovalDecision(APIView):
    def post(self, request: Request, approval_id: str) -> Response:
        user = request.user
        if not can_decide(user):
            raise PermissionDenied("Only approvers decide approvals.")
        approval = _approvals().filter(pk=approval_id).first()
        if approval is None:
            raise Http404
        data = request.data if isinstance(request.data, dict) else {}
        arguments = data.get("arguments")
        try:
            decided = approval_decide(
                approval=approval,
                user=user,
                decision=str(data.get("decision", "")),
                arguments=arguments,
                reason=str(data.get("reason") or ""),
            )
        except DecisionError as exc:
            return Response({"error": str(exc), "detail": str(exc)}, status=exc.status)
        decided = _approvals().get(pk=decided.pk)
        return Response(redacted(approval_payload(decided)))
