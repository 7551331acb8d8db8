"""The Slack interactivity endpoint: ``POST /integrations/slack/interactions/``.

No session and no token: Slack signs every request with the app's signing
secret, and that signature is the authentication (``notify.interactions``).
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.parsers import FormParser
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from infra.api.schema import ErrorSchema
from notify.interactions import slack_interaction


class SlackInteractionForm(serializers.Serializer):
    payload = serializers.CharField(
        help_text="Slack's interaction payload (block_actions or view_submission), "
        "JSON, form-encoded as Slack sends it"
    )


class SlackInteractionAnswer(serializers.Serializer):
    ok = serializers.BooleanField()
    error = serializers.CharField(required=False)
    status = serializers.CharField(
        required=False, help_text="The request's status after the interaction"
    )
    decided_by = serializers.CharField(
        required=False, allow_null=True, help_text="Who decided, when it was too late"
    )
    response_action = serializers.CharField(
        required=False, help_text="For the reject modal: clear, or errors"
    )


class SlackInteractions(APIView):
    authentication_classes: list[type] = []
    permission_classes = [AllowAny]
    throttle_classes: list[type] = []
    parser_classes = [FormParser]

    @extend_schema(
        operation_id="slack_interactions",
        summary="Slack's interactivity request URL (Approve, Reject, the reason)",
        description="Signed by Slack (X-Slack-Signature, X-Slack-Request-Timestamp "
        "over the raw body); a stale (more than 5 minutes off), forged or replayed "
        "request is refused and audited. Configure it as the Slack app's "
        "Interactivity Request URL.",
        request={"application/x-www-form-urlencoded": SlackInteractionForm},
        responses={
            200: SlackInteractionAnswer,
            400: ErrorSchema,
            401: OpenApiResponse(ErrorSchema, "Unsigned, forged or stale"),
            409: OpenApiResponse(ErrorSchema, "A replayed request"),
            404: OpenApiResponse(ErrorSchema, "No Slack signing secret configured"),
        },
        auth=[],
    )
    def post(self, request: Request) -> Response:
        # The raw body, exactly as signed (read before anything parses it).
        body = request.body
        answer = slack_interaction(
            body=body,
            timestamp=request.headers.get("X-Slack-Request-Timestamp"),
            signature=request.headers.get("X-Slack-Signature"),
        )
        return Response(answer.body, status=answer.status)
