"""The model_call steps a turn records: a reply's, a failed request's, a cut reply's.

Pure constructors of :class:`~engine.spec.StepRecord`: the loop
(:class:`engine.loop.Engine`) gives each its seq (:func:`next_seq`), the run's
redactor and price, and persists what they return.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from .context import TokenEstimator
from .model_client import ModelError, ModelReply
from .pricing import ModelPrice
from .redaction import Redactor
from .spec import (
    Attempt,
    DetailKey,
    ErrorClass,
    StepKind,
    StepRecord,
    StepStatus,
    Usage,
    utcnow,
)


def model_step(
    reply: ModelReply,
    *,
    seq: int,
    estimate: float,
    in_context: int,
    redactor: Redactor,
    price: ModelPrice | None,
) -> StepRecord:
    """The model_call step of ``reply``: its usage (estimated when the
    endpoint reported none, so it is never silently 0) and its cost."""
    now = utcnow()
    usage = reply.usage
    if not reply.usage_reported:
        completion = TokenEstimator().estimate([reply.message])
        usage = Usage(in_context, completion, in_context + completion, estimated=True)
    return StepRecord(
        seq=seq,
        kind=StepKind.MODEL_CALL,
        status=StepStatus.SUCCEEDED,
        model=reply.model,
        request_id=reply.request_id,
        response=redactor.data(reply.message),
        usage=usage.as_dict(),
        attempts=[a.as_dict() for a in reply.attempts],
        started_at=_ago(now, reply.latency_ms),
        finished_at=now,
        cost_usd=price.cost(usage) if price is not None else None,
        detail={
            DetailKey.PROMPT_ESTIMATE: round(estimate, 1),
            DetailKey.FINISH_REASON: reply.finish_reason,
        },
    )


def failed_model_step(
    exc: ModelError,
    *,
    seq: int,
    model: str,
    detail: dict[str, Any],
    priced: bool,
) -> StepRecord:
    """The model_call step of a request that failed after its retries: it
    started with its first attempt, and took as long as all of them."""
    now = utcnow()
    return StepRecord(
        seq=seq,
        kind=StepKind.MODEL_CALL,
        status=StepStatus.FAILED,
        model=model,
        error=str(exc),
        error_class=exc.kind,
        attempts=[a.as_dict() for a in exc.attempts],
        started_at=_first_attempt_start(exc.attempts) or now,
        finished_at=now,
        # A failed request is not billed; unknown without a price.
        cost_usd=0.0 if priced else None,
        detail=detail,
    )


def cut_step(partial: ModelReply, *, seq: int, redactor: Redactor) -> StepRecord:
    """The model_call step of a reply cut short by a cancel: the text it had
    written, marked as cut; the calls it had begun are not kept (they never
    completed, and nothing runs after a cancel)."""
    now = utcnow()
    return StepRecord(
        seq=seq,
        kind=StepKind.MODEL_CALL,
        status=StepStatus.FAILED,
        model=partial.model,
        request_id=partial.request_id,
        response=redactor.data(partial.message),
        error="The run was cancelled while the model was answering; its reply was cut.",
        error_class=ErrorClass.CANCELLED,
        started_at=_ago(now, partial.latency_ms),
        finished_at=now,
        cost_usd=None,
        detail={DetailKey.CUT: True, DetailKey.FINISH_REASON: None},
    )


def next_seq(steps: Sequence[StepRecord]) -> int:
    """The seq the next step of ``steps`` gets."""
    return max((s.seq for s in steps), default=0) + 1


def _first_attempt_start(attempts: Sequence[Attempt]) -> dt.datetime | None:
    """When the first of ``attempts`` started (None: none, or no time known)."""
    try:
        return dt.datetime.fromisoformat(attempts[0].started_at) if attempts else None
    except ValueError:
        return None


def _ago(now: Any, latency_ms: float) -> Any:
    return now - dt.timedelta(milliseconds=latency_ms)
