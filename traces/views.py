"""Trace pages: the list with filters, one run's timeline and player, stats."""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from approvals.models import ApprovalRequest
from approvals.selectors import task_approvals
from audit.permissions import can_audit
from engine.canonical import dumps
from engine.pricing import format_usd, snapshot_price
from engine.routing import ROUTE_KEY, Route, RouteBy, recorded_route
from engine.spec import (
    AgentSnapshot,
    DetailKey,
    HumanDecision,
    StepDetail,
    StepKind,
)
from feedback.judges import agreement_per_judge, online_scores
from feedback.services import feedback_on, feedback_per_agent
from guardrails.selectors import trip_counts
from infra.views import template_enum
from registry.models import Agent
from runs import ports
from runs.models import Message, Step, Task
from runs.selectors import (
    filter_agent_version,
    filter_equal,
    filter_tainted,
    visible_task,
    visible_tasks,
)
from traces import charts, stats
from traces.replay import policy_decision

FILTERS = (
    "status",
    "stop_reason",
    "agent",
    "user",
    "tool",
    "since",
    "until",
    "approvals",
    "tainted",
    "origin",
    "conversation",
    "intent",
    "source",
    "agent_version",
    "q",
)
PAGE_SIZE = 50


def parse_day(value: str, end: bool = False) -> datetime | None:
    """Midnight (or the last instant, with ``end``) of a YYYY-MM-DD day."""
    try:
        day = datetime.strptime(value, "%Y-%m-%d").date()
    except ValueError:
        return None
    return timezone.make_aware(datetime.combine(day, time.max if end else time.min))


def filter_tasks(tasks: QuerySet[Task], params: Any) -> QuerySet[Task]:
    """Apply the trace list's filters (query parameters) to ``tasks``."""
    tasks = filter_equal(
        tasks,
        params,
        {
            "status": "status",
            "stop_reason": "stop_reason",
            "agent": "agent__name",
            "user": "owner__username",
            "intent": "intent",
            "source": "source",
        },
    )
    if params.get("tool"):
        tasks = tasks.filter(
            Exists(Step.objects.filter(task=OuterRef("pk"), tool=params["tool"]))
        )
    since = parse_day(params.get("since", ""))
    if since:
        tasks = tasks.filter(created_at__gte=since)
    until = parse_day(params.get("until", ""), end=True)
    if until:
        tasks = tasks.filter(created_at__lte=until)
    approvals = Exists(ApprovalRequest.objects.filter(task=OuterRef("pk")))
    if params.get("approvals") == "yes":
        tasks = tasks.filter(approvals)
    elif params.get("approvals") == "no":
        tasks = tasks.exclude(approvals)
    tasks = filter_tainted(tasks, params.get("tainted"))
    tasks = filter_agent_version(tasks, params.get("agent_version"))
    origin = params.get("origin")
    if origin == "imported":
        tasks = tasks.filter(origin__isnull=False)
    elif origin == "fork":
        tasks = tasks.filter(parent_seq__isnull=False, origin__isnull=True)
    elif origin == "local":
        tasks = tasks.filter(origin__isnull=True, eval_case__isnull=True)
    elif origin == "eval":
        tasks = tasks.filter(eval_case__isnull=False)
    if params.get("conversation"):
        try:
            tasks = tasks.filter(conversation_id=params["conversation"])
        except Exception:  # noqa: BLE001 - not a UUID: nothing matches
            tasks = tasks.none()
    if params.get("q"):
        query = params["q"].strip()
        tasks = tasks.filter(
            Q(goal__icontains=query) | Q(final_answer__icontains=query)
        )
    return tasks


@login_required
def trace_list(request: HttpRequest) -> HttpResponse:
    auditor = can_audit(request.user)
    visible = visible_tasks(request.user)
    tasks = filter_tasks(
        visible.select_related("agent", "owner"), request.GET
    ).order_by("-created_at")
    try:
        page = Paginator(tasks, PAGE_SIZE).get_page(request.GET.get("page"))
    except ValueError:
        raise Http404("No such page.") from None
    query = request.GET.copy()
    query.pop("page", None)
    tools = Step.objects.exclude(tool=None).filter(task__in=visible)
    return render(
        request,
        "traces/list.html",
        {
            "page": page,
            "filters": {k: request.GET.get(k, "") for k in FILTERS},
            "query": query.urlencode(),
            "statuses": Task.Status.values,
            "stop_reasons": Task.StopReason.values,
            "agents": agents_of(visible),
            "tools": sorted(set(tools.values_list("tool", flat=True).distinct())),
            "intents": intents_of(visible),
            # What the runs listed cost (a conversation's, an agent's, a user's).
            "totals": stats.summary(tasks.order_by()),
            "show_user": auditor,
            "can_import": auditor,
        },
    )


def agents_of(tasks: QuerySet[Task]) -> QuerySet[Agent]:
    """The agents ``tasks`` ran with, for the filters: no name of an agent the
    viewer has no run of (and may not even use)."""
    return Agent.objects.filter(pk__in=tasks.order_by().values("agent_id")).order_by(
        "name"
    )


def intents_of(tasks: QuerySet[Task]) -> list[str]:
    """The intents (routes) ``tasks`` were given, for the filters."""
    rows = tasks.exclude(intent=None).order_by().values_list("intent", flat=True)
    return sorted({intent for intent in rows.distinct() if intent})


# -- one trace ----------


@dataclass
class StepRow:
    """One step of the timeline with what the trace page shows beside it."""

    step: Step
    left: float = 0.0
    width: float = 0.0
    lane: int = 0
    facts: list[tuple[str, str]] = field(default_factory=list)
    approval: dict[str, Any] | None = None
    copied: dict[str, Any] | None = None
    fork_arguments: str = ""


def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.0f} ms" if value < 1000 else f"{value / 1000:.2f} s"


def _facts(step: Step) -> list[tuple[str, str]]:
    facts: list[tuple[str, str]] = []
    attempts = step.attempts or []
    if step.kind == Step.Kind.MODEL_CALL:
        usage = step.usage or {}
        tokens = (
            f"{usage.get('prompt_tokens', 0)} prompt + "
            f"{usage.get('completion_tokens', 0)} completion = "
            f"{usage.get('total_tokens', 0)}"
            if usage
            else "—"
        )
        if usage.get("cached_tokens"):
            tokens += f" ({usage['cached_tokens']} prompt tokens cached)"
        if usage.get("estimated"):
            tokens += " — estimated: the endpoint reported no usage"
        facts += [
            ("model", step.model or "—"),
            ("request id", step.request_id or "—"),
            ("latency", _ms(step.duration_ms)),
            ("tokens", tokens),
            ("cost", format_usd(step.cost_usd)),
        ]
        route = Route.from_json((step.detail or {}).get(DetailKey.ROUTE))
        if route is not None:
            chooser = "the model" if route.by is RouteBy.MODEL else route.by.value
            facts.append(("route", f"{route.intent} (chosen by {chooser})"))
        finish = StepDetail(step.detail).finish_reason
        if finish:
            facts.append(("finish reason", finish))
    elif step.kind == Step.Kind.TOOL_CALL:
        facts += [
            ("decision", policy_decision(step.record()) or "—"),
            ("duration", _ms(step.duration_ms)),
            ("attempts", str(len(attempts)) if attempts else "—"),
            ("cache hit", "yes" if step.status == Step.Status.CACHED else "no"),
        ]
        if step.tool_version:
            facts.append(("tool version", str(step.tool_version)))
        if step.error_class:
            facts.append(("error class", step.error_class))
        if step.idempotency_key:
            facts.append(("idempotency key", step.idempotency_key))
    failed_attempts = [a for a in attempts if isinstance(a, dict) and a.get("error")]
    for attempt in failed_attempts:
        facts.append(
            (
                f"attempt {attempt.get('number')}",
                f"{attempt.get('error_class') or 'error'}: {attempt.get('error')}",
            )
        )
    return facts


def _approval_info(approval: ApprovalRequest) -> dict[str, Any]:
    votes = [v.user.get_username() for v in approval.votes.all()]
    return {
        "status": approval.status,
        "kind": approval.kind,
        "risk": approval.risk,
        "reasons": list(approval.reasons or []),
        "requested_at": approval.requested_at,
        "expires_at": approval.expires_at,
        "approved_by": votes,
        "decided_by": approval.decided_by.get_username()
        if approval.decided_by
        else None,
        "decided_at": approval.decided_at,
        "reason": approval.reason,
        "diff": approval.diff,
        "preview": approval.preview,
    }


def _imported_approval_info(data: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": data.get("status"),
        "kind": data.get("kind"),
        "risk": data.get("risk"),
        "reasons": list(data.get("reasons") or []),
        "requested_at": _time(data.get("requested_at")),
        "expires_at": _time(data.get("expires_at")),
        "approved_by": list(data.get("approved_by") or []),
        "decided_by": data.get("decided_by"),
        "decided_at": _time(data.get("decided_at")),
        "reason": data.get("reason"),
        "diff": data.get("diff"),
        "preview": data.get("preview"),
    }


def _time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_datetime(value)
    except ValueError:
        return None


def _place(rows: list[StepRow]) -> float:
    """Bar offsets and widths (percent of the run's span) and parallel lanes.

    A fork's steps copied from its parent keep the parent's times: they get no
    bar, and the span is the fork's own (or the bars would sit squeezed at both
    ends of however long the parent ran before the fork).
    """
    own = [r for r in rows if not StepDetail(r.step.detail).copied_from]
    rows = own or rows
    times = [r.step.started_at for r in rows if r.step.started_at] + [
        r.step.finished_at for r in rows if r.step.finished_at
    ]
    if not times:
        return 0.0
    start, end = min(times), max(times)
    span = max((end - start).total_seconds(), 0.001)
    lane_ends: list[dt.datetime] = []
    for row in sorted(
        (r for r in rows if r.step.started_at),
        key=lambda r: (r.step.started_at, r.step.seq),
    ):
        began = row.step.started_at
        assert began is not None
        finish = row.step.finished_at or began
        row.left = round((began - start).total_seconds() / span * 100, 3)
        row.width = round(max((finish - began).total_seconds() / span * 100, 0.4), 3)
        for lane, lane_end in enumerate(lane_ends):
            if lane_end <= began:
                row.lane = lane
                lane_ends[lane] = finish
                break
        else:
            row.lane = len(lane_ends)
            lane_ends.append(finish)
    return span


def timeline(task: Task, steps: list[Step]) -> list[dict[str, Any]]:
    """Each step with its offset and width as percentages of the run's span."""
    rows = [StepRow(step=s) for s in steps]
    _place(rows)
    return [{"step": r.step, "left": r.left, "width": r.width} for r in rows]


# -- the replay player's frames ----------


def _state(step: Step, **changes: Any) -> Step:
    """A copy of ``step`` as it looked earlier (rendered, never saved)."""
    earlier = copy.copy(step)
    earlier.detail = dict(step.detail or {})
    for name, value in changes.items():
        setattr(earlier, name, value)
    return earlier


def _html(step: Step) -> str:
    return render_to_string("runs/_step.html", {"step": step})


def replay_frames(task: Task, steps: list[Step]) -> dict[str, Any]:
    """What the chat showed, moment by moment: ``{"frames": [{t, seq, html}]}``.

    Each frame is the shared step partial rendered for a step's state at time
    ``t`` (ms after the user's message): a call appears when its model turn
    was planned (running, or waiting for approval), changes on a decision, and
    shows its outcome when it finished; the reply appears when the run ended.
    """
    t0 = task.created_at
    frames: list[dict[str, Any]] = []
    by_seq = {s.seq: s for s in steps}

    def add(at: dt.datetime | None, step: Step | None, html: str, kind: str) -> None:
        when = at or t0
        frames.append(
            {
                "t": max(0, round((when - t0).total_seconds() * 1000)),
                "seq": step.seq if step is not None else None,
                "kind": kind,
                "html": html,
            }
        )

    for step in steps:
        if step.kind != Step.Kind.TOOL_CALL:
            add(step.finished_at or step.started_at, step, _html(step), step.kind)
            continue
        parent = by_seq.get(step.parent_seq or -1)
        planned = (parent.finished_at if parent else None) or step.started_at
        final_at = step.finished_at or step.started_at or planned
        detail = step.detail or {}
        read = StepDetail(detail)
        waited = read.waited_for_approval
        if step.started_at is None and not waited:
            # Decided at planning time (denied, invalid, deduplicated, skipped).
            add(planned, step, _html(step), StepKind.TOOL_CALL)
            continue
        blank = {"result": None, "error": None, "finished_at": None}
        if waited:
            before = {k: v for k, v in detail.items() if k != DetailKey.DECISION}
            add(
                planned,
                step,
                _html(
                    _state(
                        step,
                        status=Step.Status.WAITING_APPROVAL,
                        started_at=None,
                        proposed_arguments=None,
                        detail=before,
                        **blank,
                    )
                ),
                StepKind.TOOL_CALL,
            )
            decision = read.decision
            if decision is not None and decision.decision is HumanDecision.APPROVE:
                add(
                    _time(decision.at) or step.started_at,
                    step,
                    _html(
                        _state(
                            step, status=Step.Status.APPROVED, started_at=None, **blank
                        )
                    ),
                    StepKind.TOOL_CALL,
                )
        else:
            add(
                planned,
                step,
                _html(
                    _state(step, status=Step.Status.RUNNING, started_at=None, **blank)
                ),
                StepKind.TOOL_CALL,
            )
        add(final_at, step, _html(step), StepKind.TOOL_CALL)
    reply = (
        Message.objects.filter(task=task, role=Message.Role.ASSISTANT)
        .order_by("created_at")
        .first()
    )
    if reply is not None and task.is_final:
        # The reply closes the run, whatever the clocks of other hosts said.
        last = max((f["t"] for f in frames), default=0)
        finished = task.finished_at or reply.created_at
        add(
            max(finished, t0 + dt.timedelta(milliseconds=last)),
            None,
            render_to_string(
                "traces/_reply.html",
                {
                    "content": reply.content,
                    "succeeded": task.status == Task.Status.SUCCEEDED,
                },
            ),
            "reply",
        )
    frames.sort(key=lambda f: f["t"])
    return {
        "task": str(task.pk),
        "frames": frames,
        "duration_ms": frames[-1]["t"] if frames else 0,
    }


@login_required
def trace_detail(request: HttpRequest, task_id: Any) -> HttpResponse:
    task = visible_task(request.user, task_id)
    if task is None:
        raise Http404("No such trace.")
    all_steps = task.steps.order_by("seq")
    paginator = Paginator(all_steps, settings.REACH_STEPS_PER_PAGE)
    try:
        page = paginator.get_page(request.GET.get("page"))
    except ValueError:
        raise Http404("No such page.") from None
    steps = list(page.object_list)
    approvals: list[dict[str, Any]] = []
    by_step: dict[int, dict[str, Any]] = {}
    if task.is_imported:
        for data in (task.origin or {}).get("approvals") or []:
            if isinstance(data, dict):
                info = _imported_approval_info(data) | {"step": data.get("step")}
                approvals.append(info)
                if isinstance(data.get("step"), int):
                    by_step[data["step"]] = info
    else:
        for approval in task_approvals(task):
            info = _approval_info(approval) | {"step": approval.step.seq}
            approvals.append(info)
            # The action's request first; a later recovery request is in the table.
            by_step.setdefault(approval.step.seq, info)
    rows = []
    for step in steps:
        detail = step.detail or {}
        row = StepRow(
            step=step,
            facts=_facts(step),
            approval=by_step.get(step.seq),
            copied=StepDetail(detail).copied_from,
        )
        if step.kind == Step.Kind.TOOL_CALL and step.arguments is not None:
            row.fork_arguments = dumps(step.arguments)
        rows.append(row)
    span_s = _place(rows)
    lanes = max((r.lane for r in rows if r.step.started_at), default=0) + 1
    snapshot = AgentSnapshot.from_json(task.agent_snapshot)
    route = Route.from_json(snapshot.extra.get(ROUTE_KEY)) or recorded_route(
        s.record() for s in steps
    )
    price = snapshot_price(snapshot.extra)
    return render(
        request,
        "traces/detail.html",
        {
            "task": task,
            "rows": rows,
            "page": page,
            "span_s": span_s,
            "lanes": lanes,
            "approvals": approvals,
            "replay": replay_frames(task, steps),
            "is_owner": task.owner_id == request.user.pk,
            "feedback": feedback_on(task),
            "forks": list(
                visible_tasks(request.user)
                .filter(parent=task)
                .select_related("owner")
                .order_by("created_at")
            ),
            "can_rerun": task.is_final,
            "can_fork": task.is_final and not task.is_imported,
            "origin": task.origin or {},
            "max_cost_usd": (
                snapshot.limits.max_cost_usd if snapshot.limits is not None else None
            ),
            "route": route,
            "route_by": template_enum(RouteBy),
            "price": price,
            # The schedule or trigger that started it, when one did.
            "source": ports.source_link()(task.source) if task.source else None,
        },
    )


# -- stats ----------


@login_required
def trace_stats(request: HttpRequest) -> HttpResponse:
    """Charts over the runs the user may see (all of them for auditors)."""
    today = timezone.localdate()
    since_text = request.GET.get("since") or (today - timedelta(days=29)).isoformat()
    until_text = request.GET.get("until") or today.isoformat()
    params = {
        "since": since_text,
        "until": until_text,
        "agent": request.GET.get("agent", ""),
        "user": request.GET.get("user", "") if can_audit(request.user) else "",
        "intent": request.GET.get("intent", ""),
        "agent_version": request.GET.get("agent_version", ""),
    }
    tasks = filter_tasks(visible_tasks(request.user), params)
    tools = stats.tool_stats(tasks)
    days, models, tokens = stats.tokens_per_model_per_day(tasks)
    cost_days, cost_models, costs = stats.cost_per_model_per_day(tasks)
    intents = stats.runs_per_intent(tasks)
    reasons = stats.stop_reasons(tasks)
    feedback_rows = feedback_per_agent(tasks)
    judge_days = online_scores(tasks)
    judge_agreement = agreement_per_judge(tasks)
    approvals = stats.approval_stats(tasks)
    approval_rows = [
        (status, approvals.counts.get(status, 0))
        for status in (
            ApprovalRequest.Status.APPROVED,
            ApprovalRequest.Status.REJECTED,
            ApprovalRequest.Status.EXPIRED,
            ApprovalRequest.Status.CANCELLED,
            ApprovalRequest.Status.PENDING,
        )
    ]
    chart_list = [
        charts.bar_chart(
            "Calls per tool",
            [(t.tool, [t.calls - t.failures, t.failures]) for t in tools],
            series=["ok", "failed"],
            stacked=True,
        ),
        charts.bar_chart(
            "Failure rate per tool",
            [(t.tool, [round(t.failure_rate * 100, 1)]) for t in tools],
            series=["failed %"],
            fmt=lambda v: f"{v:.1f} %",
            maximum=100.0,
        ),
        charts.bar_chart(
            "Latency per tool (p50, p95)",
            [(t.tool, [t.p50_ms or 0.0, t.p95_ms or 0.0]) for t in tools],
            series=["p50", "p95"],
            fmt=_ms,
        ),
        charts.column_chart(
            "Tokens per model per day",
            [(day, [float(tokens.get((day, m), 0)) for m in models]) for day in days],
            series=models,
        ),
        charts.column_chart(
            "Cost per model per day (USD)",
            [
                (day, [float(costs.get((day, m)) or 0.0) for m in cost_models])
                for day in cost_days
            ],
            series=cost_models,
            fmt=format_usd,
        ),
        charts.bar_chart(
            "Stop reasons",
            [(reason, [float(n)]) for reason, n in reasons],
            series=["runs"],
        ),
        charts.bar_chart(
            "Approvals",
            [
                (status, [float(n)])
                for status, n in approval_rows
                if n
                or status
                in (
                    ApprovalRequest.Status.APPROVED,
                    ApprovalRequest.Status.REJECTED,
                    ApprovalRequest.Status.EXPIRED,
                )
            ],
            series=["requests"],
        ),
    ]
    if intents:
        # Only for agents that route (the others have no intent).
        chart_list.insert(
            5,
            charts.bar_chart(
                "Runs per intent",
                [(intent, [float(n)]) for intent, n, _ in intents],
                series=["runs"],
            ),
        )
    return render(
        request,
        "traces/stats.html",
        {
            "charts": chart_list,
            "tools": tools,
            "days": days,
            "models": models,
            "token_rows": [
                (day, [tokens.get((day, m), 0) for m in models]) for day in days
            ],
            "reasons": reasons,
            "feedback_rows": feedback_rows,
            "judge_days": judge_days,
            "judge_agreement": judge_agreement,
            "guardrail_rows": trip_counts(tasks),
            "approval_rows": approval_rows,
            "median_decision": stats.human_duration(approvals.median_decision_s),
            "decided": approvals.decided,
            "summary": stats.summary(tasks),
            "cost_models": cost_models,
            "cost_rows": [
                (day, [costs.get((day, m), None) for m in cost_models])
                for day in cost_days
            ],
            "top_users": stats.top_users(tasks),
            "intent_rows": intents,
            "version_rows": stats.runs_per_version(tasks),
            "intents": intents_of(visible_tasks(request.user)),
            "filters": params,
            "agents": agents_of(visible_tasks(request.user)),
            "show_user": can_audit(request.user),
        },
    )
