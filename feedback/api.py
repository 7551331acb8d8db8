"""``/api/tasks/{id}/feedback/`` (a user's thumbs on an answer), ``/api/feedback/``
(the caller's own, for a conversation), and the review queue's labels
(``/api/review/queue/``, ``/api/tasks/{id}/label/``, ``/api/review/labels/``).

Refusals answer through the API's exception handler (:mod:`infra.api.errors`):
someone else's run is 404, as every object of others is.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.http import Http404
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.exceptions import ValidationError as ApiValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.permissions import can_audit
from feedback import services
from feedback.models import Feedback, ReviewLabel
from infra.api.common import paginate, redacted
from infra.api.schema import ErrorSchema
from infra.errors import ErrorKind
from runs.api.common import own_conversation_or_404, visible_task_or_404
from runs.models import Task


class FeedbackSchema(serializers.Serializer):
    task = serializers.UUIDField()
    rating = serializers.ChoiceField(Feedback.Rating.values)
    comment = serializers.CharField(allow_blank=True)
    user = serializers.CharField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class FeedbackInSchema(serializers.Serializer):
    rating = serializers.ChoiceField(Feedback.Rating.values)
    comment = serializers.CharField(required=False, allow_blank=True)


class FeedbackListSchema(serializers.Serializer):
    feedback = FeedbackSchema(many=True)


class LabelSchema(serializers.Serializer):
    task = serializers.UUIDField()
    purged = serializers.BooleanField()
    agent = serializers.CharField()
    goal = serializers.CharField()
    answer = serializers.CharField(allow_blank=True)
    verdict = serializers.ChoiceField(ReviewLabel.Verdict.values)
    corrected_answer = serializers.CharField(allow_blank=True)
    notes = serializers.CharField(allow_blank=True)
    reviewer = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class LabelInSchema(serializers.Serializer):
    verdict = serializers.ChoiceField(ReviewLabel.Verdict.values)
    corrected_answer = serializers.CharField(required=False, allow_blank=True)
    notes = serializers.CharField(required=False, allow_blank=True)


class QueueItemSchema(serializers.Serializer):
    task = serializers.UUIDField()
    reason = serializers.CharField()
    agent = serializers.CharField()
    owner = serializers.CharField()
    goal = serializers.CharField()
    status = serializers.CharField()
    stop_reason = serializers.CharField(allow_null=True)
    answer = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()


def _text(data: Any, name: str) -> str:
    value = data.get(name, "") if isinstance(data, dict) else ""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ApiValidationError({name: [f"{name} is a string."]})
    return value


def _choice(data: Any, name: str, choices: list[str]) -> str:
    value = data.get(name) if isinstance(data, dict) else None
    if value not in choices:
        raise ApiValidationError({name: [f"{name} is one of {', '.join(choices)}."]})
    return str(value)


class TaskFeedback(APIView):
    @extend_schema(
        responses={200: FeedbackListSchema, 404: ErrorSchema},
        operation_id="tasks_feedback_list",
    )
    def get(self, request: Request, task_id: str) -> Response:
        """The feedback on the run that the caller may read: their own; every
        person's for auditors."""
        task = visible_task_or_404(request, task_id)
        rows = task.feedback.select_related("user")
        if task.owner_id == request.user.pk:
            rows = rows.filter(user=request.user)
        # else an auditor (visible_task_or_404 let no one else in): everyone's.
        return Response(
            redacted({"feedback": [services.feedback_payload(r) for r in rows]})
        )

    @extend_schema(
        request=FeedbackInSchema,
        responses={
            200: FeedbackSchema,
            201: FeedbackSchema,
            400: ErrorSchema,
            403: ErrorSchema,
            404: ErrorSchema,
            409: ErrorSchema,
        },
        operation_id="tasks_feedback_give",
    )
    def post(self, request: Request, task_id: str) -> Response:
        """Thumbs up or down on the run's answer, with an optional comment; again
        to change it (only the run's owner)."""
        task = visible_task_or_404(request, task_id)
        had = Feedback.objects.filter(task=task, user=request.user).exists()
        row = services.give_feedback(
            user=request.user,
            task=task,
            rating=_choice(request.data, "rating", Feedback.Rating.values),
            comment=_text(request.data, "comment"),
        )
        return Response(
            redacted(services.feedback_payload(row)),
            status=status.HTTP_200_OK if had else status.HTTP_201_CREATED,
        )

    @extend_schema(
        responses={204: None, 404: ErrorSchema}, operation_id="tasks_feedback_withdraw"
    )
    def delete(self, request: Request, task_id: str) -> Response:
        task = visible_task_or_404(request, task_id)
        if not services.withdraw_feedback(user=request.user, task=task):
            raise Http404
        return Response(status=status.HTTP_204_NO_CONTENT)


class MyFeedback(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("conversation", OpenApiTypes.UUID, required=True)],
        responses={200: FeedbackListSchema, 400: ErrorSchema, 404: ErrorSchema},
        operation_id="feedback_mine",
    )
    def get(self, request: Request) -> Response:
        """The caller's own feedback on the runs of one of their conversations
        (what the chat shows under each answer)."""
        conversation_id = request.query_params.get("conversation")
        if not conversation_id:
            raise ApiValidationError({"conversation": ["conversation is required."]})
        try:
            uuid.UUID(conversation_id)
        except ValueError as exc:
            raise ApiValidationError(
                {"conversation": ["conversation is a conversation's id (a UUID)."]}
            ) from exc
        conversation = own_conversation_or_404(request, conversation_id)
        rows = Feedback.objects.filter(
            user=request.user, task__conversation=conversation
        ).select_related("user")
        return Response(
            redacted({"feedback": [services.feedback_payload(r) for r in rows]})
        )


def _reviewer(request: Request) -> None:
    if not services.can_review(request.user):
        raise PermissionDenied(
            "The review queue needs the “Can label runs in the review queue” "
            "permission."
        )


def _queue_item(task: Task, reason: str) -> dict[str, Any]:
    return {
        "task": str(task.pk),
        "reason": reason,
        "agent": task.agent.name,
        "owner": task.owner.get_username(),
        "goal": task.goal,
        "status": task.status,
        "stop_reason": task.stop_reason,
        "answer": task.final_answer,
        "created_at": task.created_at.isoformat(),
    }


class ReviewQueue(APIView):
    @extend_schema(
        responses={200: QueueItemSchema(many=True), 403: ErrorSchema},
        operation_id="review_queue",
    )
    def get(self, request: Request) -> Response:
        """Unlabelled runs to label: thumbs-downs, runs stopped on a limit, a
        sample of the rest (reviewers)."""
        _reviewer(request)
        items = [_queue_item(t, reason) for t, reason in services.review_queue()]
        return Response(redacted(items))


class TaskLabel(APIView):
    @extend_schema(
        request=LabelInSchema,
        responses={
            200: LabelSchema,
            403: ErrorSchema,
            404: ErrorSchema,
            409: ErrorSchema,
        },
        operation_id="tasks_label",
    )
    def post(self, request: Request, task_id: str) -> Response:
        """Label the run: correct or incorrect, the answer it should have given,
        notes (reviewers; labelling again changes it)."""
        _reviewer(request)
        task = Task.objects.select_related("agent").filter(pk=task_id).first()
        if task is None:
            if ReviewLabel.objects.filter(task_ref=task_id).exists():
                raise services.FeedbackRefused(
                    "This run was purged (trace retention); its label is kept "
                    "but can no longer change.",
                    ErrorKind.NOT_FOUND,
                )
            raise Http404
        row = services.label_run(
            reviewer=request.user,
            task=task,
            verdict=_choice(request.data, "verdict", ReviewLabel.Verdict.values),
            corrected_answer=_text(request.data, "corrected_answer"),
            notes=_text(request.data, "notes"),
        )
        return Response(redacted(services.label_payload(row)))


class LabelList(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("since", OpenApiTypes.DATETIME)],
        responses={200: LabelSchema(many=True), 400: ErrorSchema, 403: ErrorSchema},
        operation_id="review_labels",
    )
    def get(self, request: Request) -> Response:
        """Every label, oldest first (reviewers and auditors); ``?since=`` keeps
        those changed since then. The review page exports them as JSON lines."""
        if not (services.can_review(request.user) or can_audit(request.user)):
            raise PermissionDenied("Labels are for reviewers and auditors.")
        since = None
        if "since" in request.query_params:
            since = parse_datetime(request.query_params["since"])
            if since is None:
                raise ApiValidationError({"since": ["since is an ISO 8601 date-time."]})
        page, headers = paginate(request, services.labels(since=since))
        return Response(
            redacted([services.label_payload(r) for r in page]), headers=headers
        )
