"""An in-memory Journal: for engine tests and for deterministic re-runs."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .journal import Control, RunSnapshot
from .spec import ErrorClass, StepRecord, StepStatus, StopReason, ToolSpec, Usage


@dataclass
class MemoryJournal:
    """Keeps steps in a list; ``finished`` holds (reason, answer, message)."""

    task_id: str = "task"
    goal: str = ""
    system: str = "You are a helpful assistant."
    model: str = "test-model"
    history: list[dict[str, str]] = field(default_factory=list)
    inherited_taint: list[str] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    rev: int = 0
    cancelled: bool = False
    parked: bool = False
    finished: tuple[StopReason, str | None, str | None] | None = None
    #: A structured answer's parsed value (engine.structured).
    answer_json: Any = None
    #: The clock (seconds); tests pass a fake one to move time without sleeping.
    now: Callable[[], float] = time.monotonic
    clock: float | None = None
    extra_active_s: float = 0.0
    parked_s: float = 0.0
    parked_at: float | None = None

    def __post_init__(self) -> None:
        if self.clock is None:
            self.clock = self.now()

    def snapshot(self) -> RunSnapshot:
        if self.parked_at is not None:
            # Resumed: time spent parked for a human is not active time.
            self.parked_s += self.now() - self.parked_at
            self.parked_at = None
            self.parked = False
        return RunSnapshot(
            goal=self.goal,
            system=self.system,
            model=self.model,
            steps=[s.copy() for s in self.steps],
            usage=Usage.from_dict(self.usage.as_dict()),
            history=list(self.history),
            inherited_taint=list(self.inherited_taint),
        )

    def append(self, steps: Sequence[StepRecord]) -> list[StepRecord]:
        out = []
        for step in steps:
            self.rev += 1
            stored = step.copy(rev=self.rev)
            if stored.usage:
                self.usage = self.usage + Usage.from_dict(stored.usage)
            self.steps.append(stored)
            out.append(stored.copy())
        return out

    def update(self, step: StepRecord) -> StepRecord:
        self.rev += 1
        stored = step.copy(rev=self.rev)
        for index, existing in enumerate(self.steps):
            if existing.seq == step.seq:
                self.steps[index] = stored
                break
        else:
            raise KeyError(step.seq)
        return stored.copy()

    def control(self) -> Control:
        return Control(cancelled=self.cancelled)

    def active_seconds(self) -> float:
        assert self.clock is not None
        parked = self.parked_s
        if self.parked_at is not None:
            parked += self.now() - self.parked_at
        return self.now() - self.clock - parked + self.extra_active_s

    def park(self) -> bool:
        if not any(s.status is StepStatus.WAITING_APPROVAL for s in self.steps):
            return False
        self.parked = True
        self.parked_at = self.now()
        return True

    def finish(
        self,
        reason: StopReason,
        *,
        answer: str | None,
        message: str | None,
        answer_json: Any = None,
    ) -> None:
        self.finished = (reason, answer, message)
        self.answer_json = answer_json

    def outcome_unknown(self, step: StepRecord, spec: ToolSpec | None) -> StepRecord:
        return self.update(
            step.copy(
                status=StepStatus.WAITING_APPROVAL,
                error="outcome unknown",
                error_class=ErrorClass.OUTCOME_UNKNOWN,
            )
        )

    def decide(self, seq: int, status: StepStatus, **changes: object) -> None:
        """Simulate a human decision on a waiting step."""
        for index, step in enumerate(self.steps):
            if step.seq == seq:
                self.rev += 1
                self.steps[index] = step.copy(status=status, rev=self.rev, **changes)
                return
        raise KeyError(seq)
