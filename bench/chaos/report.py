"""What a chaos session prints and writes: counts, invariants, the fault log.

Django-free, so the command line can report even when a session broke early.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.chaos.faults import Fault

_STARTED = time.monotonic()


def say(message: str) -> None:
    """One progress line, stamped with the seconds since the session began."""
    print(f"[chaos {time.monotonic() - _STARTED:6.1f} s] {message}", flush=True)


@dataclass
class Invariant:
    """One checked property: how many times it was broken, and examples."""

    name: str
    count: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, count: int, example: str) -> None:
        if count:
            self.count += count
            if len(self.examples) < 5:
                self.examples.append(example)


@dataclass
class Outcome:
    """What a session did and found."""

    counts: list[tuple[str, Any]] = field(default_factory=list)
    invariants: list[Invariant] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return (
            not self.errors
            and bool(self.invariants)
            and all(i.count == 0 for i in self.invariants)
        )


def render(rows: Sequence[tuple[str, Any]], header: tuple[str, str]) -> str:
    """A two-column Markdown table."""
    width = max(len(header[0]), *(len(name) for name, _ in rows))
    lines = [
        f"| {header[0]:<{width}} | {header[1]:>6} |",
        f"|{'-' * (width + 2)}|{'-' * 7}:|",
    ]
    lines += [f"| {name:<{width}} | {value!s:>6} |" for name, value in rows]
    return "\n".join(lines)


def report_text(seed: int, outcome: Outcome) -> str:
    """The counts and invariant tables, examples of what broke, the fault log."""
    lines = [""]
    if outcome.counts:
        lines += [render(outcome.counts, ("what happened", "count")), ""]
    if outcome.invariants:
        rows = [(i.name, i.count) for i in outcome.invariants]
        lines += [render(rows, ("invariant (must be 0)", "count"))]
    broken = [i for i in outcome.invariants if i.count]
    for invariant in broken:
        lines += ["", f"{invariant.name}:"] + [f"  {e}" for e in invariant.examples]
    if outcome.errors:
        lines += [""] + [f"error: {e}" for e in outcome.errors]
    if outcome.faults:
        lines += ["", "faults (seconds since the start):"] + [
            f"  {f.at_s:7.1f}  {f.kind:<20} {f.detail}" for f in outcome.faults
        ]
    verdict = "PASS" if outcome.passed else "FAIL"
    lines += [
        "",
        f"{verdict} (seed {seed}): {len(broken)} of {len(outcome.invariants)} "
        "invariants broken" + (", session errors" if outcome.errors else ""),
    ]
    return "\n".join(lines)


def report_document(options: argparse.Namespace, outcome: Outcome) -> dict[str, Any]:
    """The JSON report (``--json``; ``report.json`` in the output directory)."""
    return {
        "seed": options.seed,
        "options": vars(options),
        "counts": {name.strip(): value for name, value in outcome.counts},
        "invariants": {i.name: i.count for i in outcome.invariants},
        "examples": {i.name: i.examples for i in outcome.invariants if i.examples},
        "faults": [
            {"at_s": f.at_s, "kind": str(f.kind), "detail": f.detail}
            for f in outcome.faults
        ],
        "errors": outcome.errors,
        "passed": outcome.passed,
    }
