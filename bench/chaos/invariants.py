"""The invariants a chaos run checks afterwards, each a count that must be zero.

Read from the database, the loopback HTTP server's log, the mail files and the
websocket clients' frames. Imported after ``django.setup()``; the counting
helpers that need no database (``excess``, ``message_ids``, ``step_problems``)
are plain functions the tests call directly.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from django.db import close_old_connections

from approvals.models import ApprovalDecision, ApprovalRequest
from bench.chaos.drive import Run, effect_happened
from bench.chaos.plan import WRITE_TOOLS, canonical
from bench.chaos.report import Invariant
from bench.chaos.watch import check_frames
from effects.models import Outbox, Ticket
from engine.spec import StepKind, StepStatus, TaskStatus
from runs.models import Step, Task

ROOT = Path(__file__).resolve().parents[2]
_MESSAGE_ID = re.compile(r"^Message-ID:\s*(\S+)", re.I | re.M)


def excess(values: Iterable[Any]) -> dict[Any, int]:
    """Each value seen more than once, with how many times too many."""
    return {value: n - 1 for value, n in Counter(values).items() if n > 1}


def message_ids(directory: Path) -> list[str]:
    """The Message-ID of every mail the file backend wrote under ``directory``."""
    if not directory.is_dir():
        return []
    found: list[str] = []
    for path in sorted(directory.iterdir()):
        found += _MESSAGE_ID.findall(path.read_text(errors="replace"))
    return found


class StepRow(NamedTuple):
    seq: int
    rev: int
    kind: str
    tool: str | None
    parent_seq: int | None
    arguments: Any
    raw_arguments: str | None
    response: Any


class StepProblems(NamedTuple):
    lost: list[str]
    duplicated: list[str]
    twice_called: list[str]


def step_problems(steps: Sequence[StepRow]) -> StepProblems:
    """What is wrong with one task's steps: seq gaps and proposed calls with no
    step (lost); a seq or rev used twice (duplicated); one call recorded twice."""
    lost: list[str] = []
    duplicated: list[str] = []
    seqs = [s.seq for s in steps]
    present = set(seqs)
    highest = max(seqs, default=0)
    lost += [f"seq {n} missing" for n in range(1, highest + 1) if n not in present]
    duplicated += [f"seq {seq} twice" for seq in excess(seqs)]
    duplicated += [f"rev {rev} twice" for rev in excess(s.rev for s in steps)]
    children = Counter(s.parent_seq for s in steps if s.kind == StepKind.TOOL_CALL)
    for step in steps:
        if step.kind != StepKind.MODEL_CALL or not isinstance(step.response, dict):
            continue
        proposed = len(step.response.get("tool_calls") or [])
        if children[step.seq] < proposed:
            lost.append(
                f"model call {step.seq} proposed {proposed} calls, "
                f"{children[step.seq]} recorded"
            )
    calls = [
        (s.tool, canonical(s.arguments if s.arguments is not None else s.raw_arguments))
        for s in steps
        if s.kind == StepKind.TOOL_CALL
    ]
    twice = [
        f"{tool} {args} recorded {n + 1} times"
        for (tool, args), n in excess(calls).items()
    ]
    return StepProblems(lost, duplicated, twice)


NAMES = {
    "unsettled": "runs neither finished nor parked for a human",
    "unplanned": "runs that did not end as planned",
    "tickets": "tickets created twice (one planned ticket)",
    "queued": "mails queued twice (one planned mail)",
    "sent": "mails sent twice (one Message-ID)",
    "http_keys": "HTTP writes received twice (one Idempotency-Key)",
    "http_refs": "HTTP writes sent under two keys (one planned write)",
    "rejected": "writes that happened after a rejection",
    "no_effect": "writes recorded done that left no effect",
    "twice_called": "tool calls recorded twice in a run",
    "steps_lost": "steps lost (seq gaps, proposed calls without a step)",
    "steps_doubled": "steps duplicated (a seq or rev twice in a task)",
    "ws_missed": "websocket: latest state of a step never received",
    "ws_doubled": "websocket: frames received twice",
    "ws_order": "websocket: frames out of rev order",
    "audit": "verify_audit problems",
}


def check(
    runs: Sequence[Run],
    *,
    parked: Iterable[str],
    http_refs: Callable[[], list[tuple[str, str]]],
    mail_dir: Path,
    env: Mapping[str, str],
) -> list[Invariant]:
    """Every invariant, in the order of ``NAMES``."""
    close_old_connections()
    found = {key: Invariant(name) for key, name in NAMES.items()}
    ids = [run.task_id for run in runs if run.task_id]
    by_task = {run.task_id: run for run in runs if run.task_id}
    parked_ids = set(parked)
    tasks = {str(t.pk): t for t in Task.objects.filter(pk__in=ids)}

    for run in runs:
        task = tasks.get(run.task_id)
        where = f"run {run.plan.number} ({run.task_id or 'never started'})"
        if task is None or not (task.is_final or run.task_id in parked_ids):
            status = task.status if task else "missing"
            found["unsettled"].add(1, f"{where}: {status}")
            continue
        if run.task_id in parked_ids:
            if not run.plan.park:
                found["unplanned"].add(1, f"{where}: parked, not planned to")
            continue
        if (task.status, task.final_answer) != (
            TaskStatus.SUCCEEDED,
            run.plan.answer,
        ):
            found["unplanned"].add(
                1,
                f"{where}: {task.status} {task.stop_reason}: "
                f"{(task.error_message or task.final_answer or '')[:160]}",
            )

    for title, n in excess(
        Ticket.objects.filter(task_id__in=ids).values_list("title", flat=True)
    ).items():
        found["tickets"].add(n, f"ticket {title!r}: {n + 1} rows")
    outbox = Outbox.objects.filter(subject__startswith="chaos ")
    for subject, n in excess(outbox.values_list("subject", flat=True)).items():
        found["queued"].add(n, f"mail {subject!r}: {n + 1} outbox rows")
    for message_id, n in excess(message_ids(mail_dir)).items():
        found["sent"].add(n, f"{message_id}: sent {n + 1} times")
    received = http_refs()
    http_keys = [key for _, key in received]
    for key, n in excess(http_keys).items():
        found["http_keys"].add(n, f"Idempotency-Key {key}: {n + 1} requests")
    keys_by_ref: dict[str, set[str]] = defaultdict(set)
    for write_ref, key in received:
        keys_by_ref[write_ref].add(key)
    for write_ref, keys in keys_by_ref.items():
        found["http_refs"].add(len(keys) - 1, f"{write_ref!r}: keys {sorted(keys)}")

    _check_writes(found, ids, http_keys)
    _check_steps(found, ids, by_task)
    _check_sockets(found, runs)
    found["audit"].add(*verify_audit(env))
    return list(found.values())


def _check_writes(
    found: dict[str, Invariant], ids: list[str], http_keys: list[str]
) -> None:
    writes = Step.objects.filter(task_id__in=ids, tool__in=list(WRITE_TOOLS))
    rejected = ApprovalRequest.objects.filter(
        task_id__in=ids, decision=ApprovalDecision.REJECT
    ).values_list("step_id", flat=True)

    def happened(step: Step) -> bool:
        key = step.idempotency_key or ""
        return effect_happened(step.tool or "", key, lambda: http_keys)

    for step in writes.filter(pk__in=rejected):
        if happened(step):
            found["rejected"].add(1, f"{step.tool} {step.idempotency_key}")
    for step in writes.filter(status=StepStatus.SUCCEEDED):
        key = step.idempotency_key or ""
        if not happened(step):
            found["no_effect"].add(1, f"{step.tool} {key}")


def _check_steps(
    found: dict[str, Invariant], ids: list[str], by_task: Mapping[str, Run]
) -> None:
    rows: dict[str, list[StepRow]] = defaultdict(list)
    for task_id, *fields in (
        Step.objects.filter(task_id__in=ids)
        .order_by("task_id", "seq")
        .values_list(*("task_id", *StepRow._fields))
    ):
        rows[str(task_id)].append(StepRow(*fields))
    for task_id, steps in rows.items():
        where = f"run {by_task[task_id].plan.number} ({task_id})"
        problems = step_problems(steps)
        for key, listed in zip(
            ("steps_lost", "steps_doubled", "twice_called"), problems, strict=True
        ):
            for problem in listed:
                found[key].add(1, f"{where}: {problem}")


def _check_sockets(found: dict[str, Invariant], runs: Sequence[Run]) -> None:
    for run in runs:
        watcher = run.watcher
        if watcher is None:
            continue
        expected = dict(
            Step.objects.filter(task_id=run.task_id).values_list("seq", "rev")
        )
        frames = [(f.seq, f.rev) for f in watcher.frames]
        result = check_frames(frames, expected)
        where = f"run {run.plan.number} ({run.task_id}), {watcher.connections} sockets"
        seen = watcher.seen()
        missed = [
            f"seq {seq} rev {rev} (saw {seen.get(seq, 'none')})"
            for seq, rev in sorted(expected.items())
            if seen.get(seq, -1) < rev
        ]
        found["ws_missed"].add(
            result.missed,
            f"{where}, last status {watcher.status or 'none'}: {', '.join(missed)}",
        )
        # socket:seq@rev, in arrival order
        arrived = " ".join(f"{f.connection}:{f.seq}@{f.rev}" for f in watcher.frames)
        found["ws_doubled"].add(result.duplicated, f"{where}: {arrived}")
        found["ws_order"].add(result.out_of_order, f"{where}: {arrived}")


def verify_audit(env: Mapping[str, str]) -> tuple[int, str]:
    """``manage.py verify_audit`` on the product's database: (problems, output)."""
    result = subprocess.run(
        [sys.executable, "manage.py", "verify_audit"],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = (result.stdout + result.stderr).strip()
    if result.returncode == 0:
        return 0, output
    match = re.search(r"(\d+) problems? found", output)
    return (int(match.group(1)) if match else 1), output[-500:]
