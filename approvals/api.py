"""Approvals API: the queue and decisions."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from approvals.models import ApprovalDecision, ApprovalRequest
from approvals.payloads import approval_payload
from approvals.selectors import (
    approval_shown,
    approvals_for,
    approvals_shown,
    approves_anything,
)
from approvals.services import approval_decide
from audit.permissions import can_audit
from infra.api.common import paginate, redacted
from infra.api.schema import ErrorSchema


class ApprovalSchema(serializers.Serializer):
    id = serializers.CharField()
    task = serializers.CharField()
    step = serializers.IntegerField()
    tool = serializers.CharField()
    risk = serializers.CharField()
    arguments = serializers.JSONField()
    proposed_arguments = serializers.JSONField(allow_null=True)
    preview = serializers.CharField()
    status = serializers.ChoiceField(ApprovalRequest.Status.values)
    tainted_by = serializers.ListField(child=serializers.CharField())
    approvals_required = serializers.IntegerField()
    approved_by = serializers.ListField(child=serializers.CharField())
    requested_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    decided_by = serializers.CharField(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(allow_null=True)
    decision = serializers.ChoiceField(
        ApprovalDecision.values,
        allow_null=True,
        help_text="What was decided (status alone cannot tell mark_done from "
        "retry); null until decided",
    )
    route = serializers.CharField(
        allow_null=True,
        help_text="The route that chose its approvers; null: none matched",
    )
    route_reason = serializers.CharField(help_text="Why that route; '' for none")
    escalated_at = serializers.DateTimeField(
        allow_null=True, help_text="When the route's escalation approvers were added"
    )


class DecisionSchema(serializers.Serializer):
    decision = serializers.ChoiceField(
        ApprovalDecision.values,
        help_text="mark_done, retry: recovery requests only (approve on one is a "
        "retry)",
    )
    arguments = serializers.JSONField(required=False, help_text="A full replacement")
    reason = serializers.CharField(required=False, help_text="Required to reject")


class ApprovalList(APIView):
    @extend_schema(responses=ApprovalSchema(many=True))
    def get(self, request: Request) -> Response:
        user = request.user
        if not (approves_anything(user) or can_audit(user)):
            raise PermissionDenied("Only approvers and auditors see approvals.")
        # An approver lists the requests they approve; an auditor every one.
        approvals = approvals_for(user).order_by("requested_at")
        wanted = request.query_params.get("status")
        if wanted:
            approvals = approvals.filter(status=wanted)
        page, headers = paginate(request, approvals)
        return Response([redacted(approval_payload(a)) for a in page], headers=headers)


class ApprovalDecisionView(APIView):
    @extend_schema(
        request=DecisionSchema,
        responses={
            200: ApprovalSchema,
            400: ErrorSchema,
            403: ErrorSchema,
            409: ErrorSchema,
        },
    )
    def post(self, request: Request, approval_id: str) -> Response:
        user = request.user
        if not approves_anything(user):
            raise PermissionDenied("Only approvers decide approvals.")
        approval = approval_shown(approval_id)
        if approval is None:
            raise Http404
        data = request.data if isinstance(request.data, dict) else {}
        # A DecisionError answers its kind's status (infra.api.errors).
        decided = approval_decide(
            approval=approval,
            user=user,
            decision=str(data.get("decision", "")),
            arguments=data.get("arguments"),
            reason=str(data.get("reason") or ""),
        )
        decided = approvals_shown().get(pk=decided.pk)
        return Response(redacted(approval_payload(decided)))
