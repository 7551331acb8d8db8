"""Where higher apps attach to a run (docs/design.md "Layout": lower layers never
import higher ones).

Two mechanisms, nothing else: a :class:`~infra.slots.Slot` for a single provider,
filled by the app named at its declaration in that app's ``AppConfig.ready``; and
a Django signal for a notification any number of apps may listen to, connected in
each listener app's ``ready``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from django.dispatch import Signal

from engine.guards import Guards
from engine.model_client import ModelClient
from engine.spec import AgentSnapshot, StepRecord
from infra.slots import Slot

if TYPE_CHECKING:
    # Named in the ports' signatures only: this module loads no model, so an
    # app's ``apps.py`` imports it at its top and fills its slots in ``ready``.
    from runs.models import Step, Task

# -- approvals -------------------------------------------------------------------


class OpenApproval(Protocol):
    def __call__(self, *, task: Task, step: Step, recovery: bool = False) -> object:
        """Park ``step``: create its request inside the caller's transaction."""


class CancelApprovals(Protocol):
    def __call__(self, *, task: Task, by: Any = None) -> None:
        """Cancel the task's pending requests inside the caller's transaction;
        ``by`` is the person who cancelled the task (None: the system)."""


@dataclass
class ApprovalPort:
    #: ``approvals.services.approval_create``
    open: OpenApproval
    #: ``approvals.services.approvals_cancel_for_task``
    cancel_for_task: CancelApprovals


#: A run parks a call by opening an approval request, and a cancelled run withdraws
#: its pending requests. Filled by ``approvals`` (``ApprovalsConfig.ready``,
#: approvals/apps.py) with ``approvals.services``' two services; required.
approvals = Slot[ApprovalPort]("approval service", filled_by="approvals")


# -- the model of a run ----------------------------------------------------------


class ModelFor(Protocol):
    def __call__(self, *, snapshot: AgentSnapshot) -> ModelClient | None:
        """The model client of a run recorded with ``snapshot``, or None when this
        provider does not answer for it (the configured endpoint does)."""


def _endpoint_only(*, snapshot: AgentSnapshot) -> ModelClient | None:
    return None


#: The key of ``AgentSnapshot.extra`` that marks a run whose model is not the
#: configured endpoint (the MCP gateway's one-call runs; it holds the call).
GATEWAY_KEY = "mcp_gateway"

#: A run whose model is not the configured endpoint (the MCP gateway's one-call
#: runs, answered by a deterministic client) gets its client here, so it goes
#: through the same engine; only a run whose snapshot holds ``GATEWAY_KEY`` asks.
#: Filled by ``gateway`` (``GatewayConfig.ready``, gateway/apps.py) with
#: ``gateway.model_client.gateway_model``; unfilled, every run talks to the
#: endpoint (None).
model_for = Slot[ModelFor](
    "model provider", filled_by="gateway", default=_endpoint_only
)


# -- what is remembered ----------------------------------------------------------


class MemoryFor(Protocol):
    def __call__(self, *, task: Task) -> StepRecord | None:
        """The note that gives a new ``task``'s model what is remembered for it
        (seq 1, a delimited data block; the taint sources of what it carries in
        ``tainted_by``), or None when the run gets none."""


def _no_memory(*, task: Task) -> StepRecord | None:
    return None


#: A run may start with what is remembered for its user. Filled by ``memory``
#: (``MemoryConfig.ready``, memory/apps.py) with ``memory.services.memory_note``;
#: unfilled, a run starts with its message alone (None).
memory_for = Slot[MemoryFor]("memory note", filled_by="memory", default=_no_memory)


# -- guardrails --------------------------------------------------------------------


class GuardsFor(Protocol):
    def __call__(self, *, snapshot: AgentSnapshot, task_id: str) -> Guards | None:
        """The guardrails of a run recorded with ``snapshot``, ready to check
        (their classifier's model, their audit), or None when it has none."""


def _no_guards(*, snapshot: AgentSnapshot, task_id: str) -> Guards | None:
    return None


#: A run starts with its agent's guardrails in its snapshot (``Agent.
#: guardrail_specs``, kept by the guardrails app), and its engine checks them with
#: what this gives: built once per run, and only for a snapshot that records
#: some. Filled by ``guardrails`` (``GuardrailsConfig.ready``, guardrails/apps.py)
#: with ``guardrails.services.guards_for``; unfilled, a run checks nothing.
guards_for = Slot[GuardsFor](
    "a run's guardrail checks", filled_by="guardrails", default=_no_guards
)


# -- pages of higher apps that runs' templates link to ----------------------------


class PageUrl(Protocol):
    def __call__(self, key: Any, /) -> str:
        """The path of the page of ``key`` (a task's or a report's id)."""


#: The path of a task's trace page. Filled by ``traces`` (``TracesConfig.ready``,
#: traces/apps.py) with ``traces.links.trace_url``; required. Templates of
#: ``runs`` and the apps above it link to it through the ``trace_url`` filter of
#: the ``reach`` tag library, never by the route's name.
trace_url = Slot[PageUrl]("trace page", filled_by="traces")

#: The path of an evaluation report's page (``Task.eval_case["report"]``). Filled
#: by ``evals`` (``EvalsConfig.ready``, evals/apps.py) with
#: ``evals.links.report_url``; required. Linked through the ``eval_report_url``
#: filter of the ``reach`` tag library.
eval_report_url = Slot[PageUrl]("evaluation report page", filled_by="evals")

#: The path of the page that makes a task's run an evaluation case ("Add to
#: suite" on a trace). Filled by ``evals`` (``EvalsConfig.ready``) with
#: ``evals.links.from_run_url``; required. Linked through the
#: ``add_to_suite_url`` filter of the ``reach`` tag library.
add_to_suite_url = Slot[PageUrl]("page that adds a run to a suite", filled_by="evals")


# -- what started a run ---------------------------------------------------------


@dataclass(frozen=True)
class SourceLink:
    """What a run's ``source`` names: a label, and its page (None: none)."""

    label: str
    url: str | None


class SourceLinkFor(Protocol):
    def __call__(self, source: str, /) -> SourceLink | None:
        """What ``source`` (``Task.source``: ``"schedule:<id>"``…) names."""


def _no_source_link(source: str, /) -> SourceLink | None:
    return None


#: The schedule or trigger that started a run, for its trace page. Filled by
#: ``automations`` (``AutomationsConfig.ready``, automations/apps.py) with
#: ``automations.links.source_link``; unfilled, the page shows the raw source.
source_link = Slot[SourceLinkFor](
    "run source", filled_by="automations", default=_no_source_link
)


# -- notifications ---------------------------------------------------------------

#: Sent with ``sender=Task, task=task`` when ``task`` reached its final status,
#: inside the caller's transaction: a receiver defers anything slow, or anything
#: that must see the commit, to ``on_commit``. No receiver at all is fine.
#: Connected by ``traces`` (``TracesConfig.ready``, traces/apps.py:
#: ``traces.otel.on_task_finished`` exports the run over OpenTelemetry), by
#: ``runs`` itself (the queued message behind it).
task_finished = Signal()

#: Sent with ``sender=Task, task=task, parked=bool`` when a task that names where
#: its outcome goes (``Task.webhook_url``) reached its final status (``parked``
#: False, just after :data:`task_finished`) or parked to wait for an approval
#: (``parked`` True), inside the transaction that wrote that state. Only then:
#: a run without a URL pays one attribute check and no receiver runs. Connected
#: by ``notify`` (``NotifyConfig.ready``, notify/apps.py:
#: ``notify.completion.on_task_outcome`` queues the completion webhook).
task_outcome = Signal()
