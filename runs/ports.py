"""Where higher apps plug into a run (docs/design.md "Layout": lower layers never
import higher ones).

A run parks a call by opening an approval request, and a cancelled run withdraws
its pending requests; both belong to ``approvals``, which sits above ``runs``. The
approvals app plugs its services in here from its ``plugs`` module (imported by
``reach_site``'s ``AppConfig.ready`` once the models are loaded, as every app's
is); this is the only place ``runs`` reaches up, and it does so through these
typed slots.

Approvals mails approvers through the effects outbox; the two apps are siblings
that may not import each other, so ``effects`` plugs its mail queue in here too.

A finished task is announced to whoever listens (``traces`` exports it over
OpenTelemetry); unlike the two slots above, no listener at all is fine.

A run may start with what is remembered for its user (``memory`` plugs in the
note that carries it); with nothing plugged a run starts with its message alone.

A run whose model is not the configured endpoint (the MCP gateway's one-call
runs, answered by a deterministic client) gets its client from a plugged
provider; with none plugged every run talks to the endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from django.core.exceptions import ImproperlyConfigured

from engine.model_client import ModelClient
from engine.spec import AgentSnapshot, StepRecord
from runs.models import Step, Task

_Port = TypeVar("_Port")


class _Required(Generic[_Port]):
    """A slot that a run cannot do without: reading it before the app that fills
    it was loaded names that app."""

    def __init__(self, what: str, app: str) -> None:
        self._what = what
        self._app = app
        self._port: _Port | None = None

    def plug(self, port: _Port) -> None:
        self._port = port

    def get(self) -> _Port:
        if self._port is None:
            raise ImproperlyConfigured(
                f"No {self._what} is plugged in: add '{self._app}' to INSTALLED_APPS."
            )
        return self._port


class OpenApproval(Protocol):
    def __call__(self, *, task: Task, step: Step, recovery: bool = False) -> object:
        """Park ``step``: create its request inside the caller's transaction."""


class CancelApprovals(Protocol):
    def __call__(self, *, task: Task, by: Any = None) -> None:
        """Cancel the task's pending requests inside the caller's transaction;
        ``by`` is the person who cancelled the task (None: the system)."""


@dataclass
class ApprovalPort:
    open: OpenApproval
    cancel_for_task: CancelApprovals


_approvals = _Required[ApprovalPort]("approval service", "approvals")
plug_approvals = _approvals.plug
approvals = _approvals.get


class QueueMail(Protocol):
    def __call__(self, *, key: str, to: str, subject: str, body: str) -> object:
        """Queue one mail inside the caller's transaction; the dispatcher sends it
        after commit (once per ``key``)."""


@dataclass
class MailPort:
    queue: QueueMail


_mail = _Required[MailPort]("mail outbox", "effects")
plug_mail = _mail.plug
mail = _mail.get


class TaskFinished(Protocol):
    def __call__(self, *, task: Task) -> None:
        """``task`` reached its final status inside the caller's transaction: defer
        anything slow, or anything that must see the commit, to ``on_commit``."""


_task_finished: list[TaskFinished] = []


def plug_task_finished(listener: TaskFinished) -> None:
    # A plugs module may be imported again (a test reloading it): plug once.
    if listener not in _task_finished:
        _task_finished.append(listener)


def task_finished(*, task: Task) -> None:
    """Tell every plugged listener that ``task`` is final."""
    for listener in tuple(_task_finished):
        listener(task=task)


class ModelFor(Protocol):
    def __call__(self, *, snapshot: AgentSnapshot) -> ModelClient | None:
        """The model client of a run recorded with ``snapshot``, or None when this
        provider does not answer for it (the configured endpoint does)."""


_model_providers: list[ModelFor] = []


def plug_model(provider: ModelFor) -> None:
    """Let a higher app answer some runs' model calls itself (the MCP gateway's
    deterministic one-call runs), so its runs go through the same engine."""
    if provider not in _model_providers:
        _model_providers.append(provider)


def model_for(*, snapshot: AgentSnapshot) -> ModelClient | None:
    for provider in tuple(_model_providers):
        client = provider(snapshot=snapshot)
        if client is not None:
            return client
    return None


class MemoryFor(Protocol):
    def __call__(self, *, task: Task) -> StepRecord | None:
        """The note that gives a new ``task``'s model what is remembered for it
        (seq 1, a delimited data block; the taint sources of what it carries in
        ``tainted_by``), or None when the run gets none."""


_memory: MemoryFor | None = None


def plug_memory(provider: MemoryFor) -> None:
    """Let the memory app give each new run what is remembered for it."""
    global _memory
    _memory = provider


def memory_for(*, task: Task) -> StepRecord | None:
    return _memory(task=task) if _memory is not None else None
