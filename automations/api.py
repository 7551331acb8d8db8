"""``POST /api/triggers/{id}/``: a signed webhook that starts a run."""

from __future__ import annotations

from django.http import RawPostDataException
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ParseError
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from automations import services
from automations.models import Trigger
from automations.signing import HEADER
from infra.api.parsers import load_json
from infra.api.schema import ErrorSchema


class TriggerAcceptedSchema(serializers.Serializer):
    task = serializers.CharField(help_text="The run started (its id).")
    conversation = serializers.CharField(help_text="Its conversation (its id).")


class TriggerFire(APIView):
    """Start the trigger's run with the message its template builds from the
    body. The caller is whoever knows the trigger's secret: no token, no session,
    no CSRF; the signature authenticates it."""

    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    # The trigger's own rate (a Redis counter per trigger) limits it.
    throttle_classes: list[type] = []

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        auth=[],
        operation_id="triggers_fire",
        parameters=[
            OpenApiParameter(
                HEADER,
                str,
                location=OpenApiParameter.HEADER,
                required=True,
                description="t=<unix seconds>,v1=<hex HMAC-SHA256 of "
                '"<t>." + body under the trigger\'s secret>',
            )
        ],
        responses={
            202: TriggerAcceptedSchema,
            400: ErrorSchema,
            401: ErrorSchema,
            403: ErrorSchema,
            404: ErrorSchema,
            409: ErrorSchema,
            429: ErrorSchema,
        },
        description="401 when unsigned, forged or stale (more than "
        "REACH_TRIGGER_TOLERANCE_S, 300 s, from now); 409 for a signature seen "
        "before; 429 over the trigger's runs per minute; 400 when the body is not "
        "JSON or lacks a field the template needs; 403 when the trigger is "
        "disabled or its owner may not use the agent. Every refusal is audited.",
    )
    def post(self, request: Request, trigger_id: str) -> Response:
        trigger = (
            Trigger.objects.select_related("owner", "agent")
            .filter(pk=trigger_id)
            .first()
        )
        if trigger is None:
            return Response(
                {"error": "No such trigger."}, status=status.HTTP_404_NOT_FOUND
            )
        try:
            raw = request.body
        except RawPostDataException as exc:  # pragma: no cover - nothing read it
            raise ParseError("The body was read already.") from exc
        try:
            services.trigger_verify(
                trigger=trigger, body=raw, header=request.headers.get(HEADER)
            )
        except services.TriggerRefused as refused:
            return Response(
                {"error": refused.message, "reason": refused.reason.value},
                status=refused.status,
            )
        body = load_json(raw)
        try:
            task = services.trigger_fire(trigger=trigger, body=body)
        except services.TemplateError as exc:
            return Response({"error": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        except services.ScheduleRefused as refused:
            return Response(
                {"error": refused.message}, status=status.HTTP_403_FORBIDDEN
            )
        except ValueError as exc:
            return Response({"error": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(
            {"task": str(task.pk), "conversation": str(task.conversation_id)},
            status=status.HTTP_202_ACCEPTED,
        )
