"""What a chaos run does, decided by its seed: the runs' plans, the model that
follows them, the approver's choices and when each fault strikes.

Django-free and deterministic: the same seed gives the same plans, the same
tool arguments, the same model latencies, the same decisions and the same fault
order (only the operating system's timing differs between two runs).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tests.support.replies import AnyReply, delay, text, tool_calls
from tests.support.scripted_model import this_turn

#: The loopback HTTP write tool the chaos run registers (its server records keys).
HTTP_TOOL = "record_write"
#: ``record_write``'s parameters: the reference of the planned write.
HTTP_TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"ref": {"type": "string", "description": "What to record."}},
    "required": ["ref"],
    "additionalProperties": False,
}
GOAL_PREFIX = "chaos run "
MAIL_TO = "ops@example.com"
EDIT_SUFFIX = " (edited by the approver)"


class Act(StrEnum):
    """One model turn of a plan."""

    CALC = "calc"  # calculate: a quick read
    LOOKUP = "lookup"  # slow_lookup: a read that takes a while, cut short by kills
    SEARCH = "search"  # search_notes: untrusted output, so later writes wait
    PAIR = "pair"  # calculate and slow_lookup in one turn: concurrent reads
    TICKET = "ticket"  # create_ticket: a database write through the ledger
    EMAIL = "email"  # send_email: irreversible, always approved by a human
    HTTP = "http"  # record_write: an HTTP write with an Idempotency-Key


READS = (Act.CALC, Act.LOOKUP, Act.SEARCH, Act.PAIR)
WRITES = (Act.TICKET, Act.EMAIL, Act.HTTP)
#: The write tools and the act that calls each.
WRITE_TOOLS = {
    "create_ticket": Act.TICKET,
    "send_email": Act.EMAIL,
    HTTP_TOOL: Act.HTTP,
}


class FaultKind(StrEnum):
    KILL = "kill worker"
    REDIS = "restart redis"
    WEB = "restart the web server"
    DATABASE = "drop db connections"


@dataclass(frozen=True)
class RunPlan:
    """One run: what its user asks, and how the driver treats it."""

    number: int
    acts: tuple[Act, ...]
    user: str
    #: Nobody decides its approvals: it must end parked, waiting for a human.
    park: bool
    #: A websocket client follows it, as an open chat page does.
    watch: bool

    @property
    def goal(self) -> str:
        return f"{GOAL_PREFIX}{self.number}: {','.join(self.acts)}"

    @property
    def answer(self) -> str:
        """The final answer the model gives once every act is done."""
        return f"chaos run {self.number} done"


def make_plans(
    seed: int, runs: int, *, watch_fraction: float, park_fraction: float
) -> list[RunPlan]:
    """``runs`` plans: one to four turns, mostly a read and a write or two."""
    plans = []
    for number in range(1, runs + 1):
        rng = random.Random(f"{seed}:plan:{number}")
        acts = [rng.choice(READS)]
        for _ in range(rng.randint(0, 3)):
            pool = WRITES if rng.random() < 0.6 else READS
            acts.append(rng.choice(pool))
        plans.append(
            RunPlan(
                number=number,
                acts=tuple(acts),
                user=rng.choice(("alice", "bob")),
                park=rng.random() < park_fraction,
                watch=rng.random() < watch_fraction,
            )
        )
    return plans


def parse_goal(goal: str) -> tuple[int, list[Act]] | None:
    """The run number and acts of a goal made by ``RunPlan.goal``."""
    if not goal.startswith(GOAL_PREFIX):
        return None
    head, _, tail = goal[len(GOAL_PREFIX) :].partition(": ")
    try:
        return int(head), [Act(name) for name in tail.split(",") if name]
    except ValueError:
        return None


def ref(number: int, index: int) -> str:
    """The name of turn ``index`` of run ``number``: in every write it makes."""
    return f"chaos {number}.{index}"


def calls_for(number: int, index: int, act: Act) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls of one turn; arguments unique to the run and turn."""
    name = ref(number, index)
    lookup: dict[str, Any] = {
        "key": name,
        "seconds": 0.2 + (number * 7 + index) % 9 / 10,
    }
    calc: dict[str, Any] = {"expression": f"{number} * 7 + {index}"}
    calls: dict[Act, list[tuple[str, dict[str, Any]]]] = {
        Act.CALC: [("calculate", calc)],
        Act.LOOKUP: [("slow_lookup", lookup)],
        # Any word of the keyword matches: the run's tag keeps each call unique.
        Act.SEARCH: [("search_notes", {"keyword": f"Redis {name.replace(' ', '-')}"})],
        Act.PAIR: [("calculate", calc), ("slow_lookup", lookup)],
        Act.TICKET: [("create_ticket", {"title": name, "body": f"Filed by {name}."})],
        Act.EMAIL: [
            (
                "send_email",
                {"to": MAIL_TO, "subject": name, "body": f"Report of {name}."},
            )
        ],
        Act.HTTP: [(HTTP_TOOL, {"ref": name})],
    }
    return calls[act]


class ChaosModel:
    """The model of the chaos runs: follows the plan written in the goal.

    Stateless: it counts the tool-calling turns already answered after the last
    user message and proposes the next one, so a worker that resumes a run (or a
    second worker) gets the same proposal. Each answer waits a latency drawn
    from the seed, run and turn.
    """

    def __init__(self, seed: int, latency: tuple[float, float]) -> None:
        self.seed = seed
        self.latency = latency

    def __call__(self, request: dict[str, Any]) -> AnyReply:
        turn = this_turn(request)
        parsed = parse_goal(turn[2]) if turn else None
        if turn is None or parsed is None:
            return text("This model only answers chaos runs.")
        messages, user_index = turn[0], turn[1]
        number, acts = parsed
        done = sum(
            1
            for message in messages[user_index + 1 :]
            if message.get("role") == "assistant" and message.get("tool_calls")
        )
        rng = random.Random(f"{self.seed}:latency:{number}:{done}")
        wait = rng.uniform(*self.latency)
        if done >= len(acts):
            return delay(wait, text(f"chaos run {number} done"))
        return delay(wait, tool_calls(calls_for(number, done, acts[done])))


@dataclass(frozen=True)
class Decision:
    """What the approver posts for one action approval."""

    decision: str  # approve or reject
    arguments: dict[str, Any] | None = None
    reason: str = ""


def action_decision(
    seed: int,
    number: int,
    step: int,
    tool: str,
    arguments: Mapping[str, Any],
    *,
    reject_fraction: float,
) -> Decision:
    """Approve, edit-then-approve (a mail's body) or reject, by the seed."""
    rng = random.Random(f"{seed}:decide:{number}:{step}")
    roll = rng.random()
    if roll < reject_fraction:
        return Decision("reject", reason=f"chaos: rejected step {step}")
    if tool == "send_email" and roll > 0.8:
        edited = {**arguments, "body": str(arguments.get("body", "")) + EDIT_SUFFIX}
        return Decision("approve", arguments=edited)
    return Decision("approve")


def fault_schedule(
    seed: int, counts: Mapping[FaultKind, int]
) -> list[tuple[float, FaultKind]]:
    """Each fault at a random point of the runs' progress (0..1), in order."""
    rng = random.Random(f"{seed}:faults")
    kinds = [kind for kind, count in counts.items() for _ in range(count)]
    rng.shuffle(kinds)
    points = sorted(rng.uniform(0.05, 0.9) for _ in kinds)
    return list(zip(points, kinds, strict=True))


def canonical(arguments: Any) -> str:
    """Arguments as one comparable string."""
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def fault_rng(seed: int) -> random.Random:
    """The fault driver's choices: which worker, how long down, which signal."""
    return random.Random(f"{seed}:fault-choices")
