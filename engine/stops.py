"""What a run records as its message when the loop stops it short of an answer:
a limit reached, a budget spent, an approval expired, a handoff loop, a block."""

from __future__ import annotations

from .spec import StopReason

#: The message of each stop reason the loop decides (others record none).
STOP_MESSAGES = {
    StopReason.MAX_STEPS: "Stopped: the run reached its limit of model steps.",
    StopReason.MAX_TOOL_CALLS: "Stopped: the run reached its limit of tool calls.",
    StopReason.REPEATED_CALL: "Stopped: the model kept repeating the same call.",
    StopReason.TOOL_ERROR_LIMIT: "Stopped: too many tool errors in this run.",
    StopReason.TIME_BUDGET: "Stopped: the run used up its time budget.",
    StopReason.TOKEN_BUDGET: "Stopped: the run used up its token budget.",
    StopReason.COST_BUDGET: "Stopped: the run used up its cost budget.",
    StopReason.APPROVAL_EXPIRED: "Stopped: an approval expired before anyone decided.",
    StopReason.HANDOFF_LOOP: "Stopped: the agents kept handing the conversation to "
    "each other.",
    # A resumed run whose block was recorded before it finished.
    StopReason.GUARDRAIL: "Stopped: a guardrail blocked the run.",
}
