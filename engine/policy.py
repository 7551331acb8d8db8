"""Policy: whether a validated call runs, waits for a human, or is refused.

The effective policy is the strictest of the tool's risk tier, its approval
setting and the task's taint. Rules are evaluated by the safe evaluator, never
by ``eval``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .safe_eval import EvaluationError, evaluate_rule
from .spec import ApprovalMode, Decision, Risk, ToolSpec

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class PolicyDecision:
    decision: Decision
    reasons: tuple[str, ...] = ()
    tainted_by: tuple[str, ...] = field(default_factory=tuple)


def decide(
    spec: ToolSpec,
    arguments: Mapping[str, Any],
    *,
    tainted_by: Sequence[str] = (),
) -> PolicyDecision:
    """Decide EXECUTE, APPROVE or DENY for one validated call."""
    reasons: list[str] = []
    if spec.risk is Risk.IRREVERSIBLE:
        reasons.append("irreversible action")
    if spec.approval is ApprovalMode.ALWAYS:
        reasons.append("this tool always needs approval")
    elif spec.approval is ApprovalMode.RULE and spec.approval_rule:
        try:
            if evaluate_rule(spec.approval_rule, dict(arguments)):
                reasons.append(f"rule matched: {spec.approval_rule}")
        except EvaluationError as exc:
            # A broken rule must fail closed: ask a human.
            reasons.append(f"approval rule could not be evaluated ({exc})")
    taint = tuple(tainted_by)
    if taint and (spec.risk is not Risk.READ_ONLY or spec.leaves_house):
        reasons.append("task read untrusted content: " + ", ".join(taint))
    if reasons:
        return PolicyDecision(Decision.APPROVE, tuple(reasons), taint)
    return PolicyDecision(Decision.EXECUTE, (), ())


def check_definition(spec: ToolSpec) -> None:
    """Raise ValueError for contradictory policy settings."""
    if spec.risk is Risk.IRREVERSIBLE and spec.approval is ApprovalMode.NEVER:
        raise ValueError(
            "An irreversible tool always needs approval: approval cannot be 'never'."
        )
    if spec.approval is ApprovalMode.RULE and not (spec.approval_rule or "").strip():
        raise ValueError("Approval 'rule' needs a rule.")
    if spec.approvals_required not in (1, 2):
        raise ValueError("approvals_required is 1 or 2.")


def render_preview(spec: ToolSpec, arguments: Mapping[str, Any]) -> str:
    """A one-line, human-readable summary of the call for the approval card."""
    template = spec.preview_template.strip()
    if template:
        # Plain {name} substitution: no format-spec mini-language, no attributes.
        return _PLACEHOLDER.sub(
            lambda m: _short(arguments.get(m.group(1), "?")), template
        )[:300]
    parts = ", ".join(f"{key}={_short(value)}" for key, value in arguments.items())
    return f"{spec.name}({parts})"[:300]


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "…"
