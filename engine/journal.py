"""The journal port: what the loop needs from a run's persistence.

:class:`Journal` is the protocol :meth:`engine.loop.Engine.advance` drives a run
through, and the types it speaks (:class:`RunSnapshot`, :class:`Control`,
:class:`Outcome`, :class:`LeaseLost`). Only the port lives here, pure Python, so
its implementations import it without the loop: ``runs.journal`` persists a run
in the database, ``engine.memory_journal`` keeps one in memory (tests, re-runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from .spec import StepRecord, StopReason, ToolSpec, Usage


class LeaseLost(Exception):
    """Another worker owns the run now; stop without writing anything more."""


class Outcome(StrEnum):
    FINISHED = "finished"
    PARKED = "parked"


@dataclass
class Control:
    """What the journal says at a step boundary."""

    cancelled: bool = False


@dataclass
class RunSnapshot:
    """Everything persisted that the next step depends on."""

    goal: str
    system: str
    model: str
    steps: list[StepRecord]
    usage: Usage = field(default_factory=Usage)
    history: list[dict[str, str]] = field(default_factory=list)
    inherited_taint: list[str] = field(default_factory=list)
    active_seconds: float = 0.0


class Journal(Protocol):
    """Persistence of one run. Every write is fenced by the run's lease."""

    task_id: str

    def snapshot(self) -> RunSnapshot: ...

    def append(self, steps: Sequence[StepRecord]) -> list[StepRecord]:
        """Persist new steps atomically (seq and rev assigned); return them.

        A step may arrive finished (a turn's read that ran before its turn was
        written, :attr:`engine.loop.Engine.read_window_s`): an untrusted result
        among them taints the run as :meth:`update` would.
        """
        ...

    def update(self, step: StepRecord) -> StepRecord:
        """Persist a change of one step (rev bumped); return it."""
        ...

    def control(self) -> Control:
        """Called at every step boundary; raises LeaseLost when fenced out."""
        ...

    def active_seconds(self) -> float:
        """Active (not parked) wall-clock seconds of the run so far."""
        ...

    def park(self) -> bool:
        """The run waits for humans: release it. False if nothing waits any more."""
        ...

    def finish(
        self,
        reason: StopReason,
        *,
        answer: str | None,
        message: str | None,
        answer_json: Any = None,
    ) -> None:
        """End the run; ``answer_json`` is a structured answer's parsed value."""
        ...

    def outcome_unknown(self, step: StepRecord, spec: ToolSpec | None) -> StepRecord:
        """A non-retryable call started before a crash; hand it to an operator."""
        ...
