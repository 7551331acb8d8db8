"""What a model call costs: list prices per million tokens, matched by model name.

A price names a model exactly (``gpt-4o``) or by a glob pattern
(``gpt-4.1-mini*``, ``claude-3-5-sonnet*``). The most specific price wins: an
exact name first, then the pattern with the most literal characters, so
``gpt-4o-mini*`` prices ``gpt-4o-mini-2024-07-18`` even beside ``gpt-4o*``.

A run resolves its price once, when it starts (it is recorded in the agent
snapshot under :data:`PRICE_KEY`), and every model step's cost is computed from
its usage when it is written. A model without a price has no cost (None, "cost
unknown"), never a cost of 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from .spec import DetailKey, StepKind, StepRecord, Usage

#: Where an agent snapshot records the price its run uses.
PRICE_KEY = "price"

_WILDCARDS = frozenset("*?[")


@dataclass(frozen=True)
class ModelPrice:
    """USD per million input, cached-input and output tokens of the models
    ``pattern`` names (a name, or a glob pattern)."""

    pattern: str
    input_per_m: float
    output_per_m: float
    #: Prompt tokens served from the endpoint's cache; None: the input price.
    cached_input_per_m: float | None = None

    @property
    def is_pattern(self) -> bool:
        return any(c in _WILDCARDS for c in self.pattern)

    def matches(self, model: str) -> bool:
        """``model`` is this price's name, or fits its pattern (any case)."""
        pattern, name = self.pattern.strip().lower(), model.strip().lower()
        if not pattern or not name:
            return False
        return fnmatchcase(name, pattern) if self.is_pattern else name == pattern

    @property
    def specificity(self) -> tuple[int, int, int]:
        """Exact names before patterns; then more literal characters first, then
        fewer wildcards (``gpt-4o*`` before ``*gpt-4o*``)."""
        wild = sum(1 for c in self.pattern if c in _WILDCARDS)
        return (0 if wild else 1, len(self.pattern) - wild, -wild)

    def cost(self, usage: Usage) -> float:
        """The USD cost of ``usage`` at this price."""
        cached = min(max(usage.cached_tokens, 0), usage.prompt_tokens)
        fresh = usage.prompt_tokens - cached
        cached_rate = (
            self.cached_input_per_m
            if self.cached_input_per_m is not None
            else self.input_per_m
        )
        total = (
            fresh * self.input_per_m
            + cached * cached_rate
            + usage.completion_tokens * self.output_per_m
        ) / 1_000_000
        return round(total, 10)

    def to_json(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "input_per_m": self.input_per_m,
            "cached_input_per_m": self.cached_input_per_m,
            "output_per_m": self.output_per_m,
        }

    @classmethod
    def from_json(cls, data: Any) -> ModelPrice | None:
        """A price as recorded; None for anything that is not one."""
        if not isinstance(data, Mapping) or not isinstance(data.get("pattern"), str):
            return None
        rates = [
            _rate(data.get(key))
            for key in ("input_per_m", "output_per_m", "cached_input_per_m")
        ]
        if rates[0] is None or rates[1] is None:
            return None
        return cls(
            pattern=data["pattern"],
            input_per_m=rates[0],
            output_per_m=rates[1],
            cached_input_per_m=rates[2],
        )


def _rate(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return float(value)


def price_for(model: str, prices: Iterable[ModelPrice]) -> ModelPrice | None:
    """The most specific of ``prices`` that matches ``model``, or None."""
    matching = [p for p in prices if p.matches(model)]
    if not matching:
        return None
    return max(matching, key=lambda p: p.specificity)


def snapshot_price(extra: Mapping[str, Any]) -> ModelPrice | None:
    """The price a run recorded in its agent snapshot (``AgentSnapshot.extra``)."""
    return ModelPrice.from_json(extra.get(PRICE_KEY))


def format_usd(value: float | None) -> str:
    """``$1.50``, ``$0.0123``, ``$0.000140``; ``cost unknown`` for None (never
    ``$0``: an unknown cost is not a free one)."""
    if value is None:
        return "cost unknown"
    if value == 0:
        return "$0.00"
    if abs(value) >= 1:
        return f"${value:,.2f}"
    if abs(value) >= 0.01:
        return f"${value:.4f}"
    if abs(value) < 0.0000005:
        return "< $0.000001"
    return f"${value:.6f}"


def run_cost(steps: Sequence[StepRecord]) -> float:
    """What the run's own model calls cost so far (USD, the priced ones; steps a
    fork copied from its parent were paid for by the parent)."""
    return sum(
        s.cost_usd
        for s in steps
        if s.kind is StepKind.MODEL_CALL
        and s.cost_usd is not None
        and DetailKey.COPIED_FROM not in s.detail
    )
