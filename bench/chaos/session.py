"""One chaos session on a prepared scratch instance (``bench.chaos.cli``).

Starts the scripted model and the recording HTTP server in this process, the
product's processes beside it, the users, the operator, the websocket clients
and the fault driver; waits for the runs to settle; checks the invariants.
Imported after ``django.setup()``.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.db import close_old_connections

from approvals.models import ApprovalRequest
from bench.chaos.drive import (
    Api,
    Approver,
    Creator,
    RecordingServer,
    Run,
    busy_worker_pid,
    install_tools,
    mail_drained,
    settle,
    tokens,
)
from bench.chaos.faults import Fault, FaultDriver, Processes
from bench.chaos.invariants import check
from bench.chaos.plan import (
    ChaosModel,
    FaultKind,
    fault_rng,
    fault_schedule,
    make_plans,
)
from bench.chaos.report import Outcome, say
from bench.chaos.threads import DriverThread
from bench.chaos.watch import Watchers
from effects.models import Outbox
from runs.models import Step, Task
from tests.support.redis_server import BundledRedis
from tests.support.scripted_model import ScriptedModel
from tests.support.stack import Stack

USERS = ("alice", "bob", "operator")


def fault_counts(options: argparse.Namespace) -> dict[FaultKind, int]:
    return {
        FaultKind.KILL: options.kills,
        FaultKind.REDIS: options.redis_restarts,
        FaultKind.WEB: options.web_restarts,
        FaultKind.DATABASE: options.db_drops,
    }


def run_session(
    options: argparse.Namespace,
    env: dict[str, str],
    redis: BundledRedis,
    *,
    postgres_url: str | None,
    out_dir: Path,
) -> Outcome:
    """The whole session; the product's processes are stopped before it returns."""
    started = time.monotonic()
    outcome = Outcome()
    records = RecordingServer(options.seed)
    records.server.start()
    model = ScriptedModel(
        ChaosModel(options.seed, (options.model_latency_min, options.model_latency_max))
    ).start()
    # A worker SIGKILLed mid-request leaves a broken pipe: not worth a traceback.
    for server in (model._server, records.server._server):
        server.handle_error = _quiet  # type: ignore[union-attr,method-assign]
    env["OPENAI_BASE_URL"] = model.base_url
    install_tools(records.server.url("/records"))
    processes = Processes(
        Stack(env=env, redis=redis),
        options.workers,
        options.threads,
        postgres_url=postgres_url,
        say=say,
    )
    watchers: Watchers | None = None
    apis: dict[str, Api] = {}
    try:
        say("starting beat, workers and the web server")
        processes.start()
        keys = tokens(USERS)
        apis = {user: Api(processes.web_url, keys[user]) for user in USERS}
        watchers = Watchers(processes.web_url.replace("http", "ws", 1), options.seed)
        watchers.start()
        plans = make_plans(
            options.seed,
            options.runs,
            watch_fraction=options.watch_fraction,
            park_fraction=options.park_fraction,
        )
        runs = [Run(plan) for plan in plans]
        schedule = fault_schedule(options.seed, fault_counts(options))
        lead = options.concurrency

        def may_start(number: int) -> bool:
            due = sum(1 for point, _ in schedule if point * len(runs) <= number - lead)
            return faults.begun >= due

        by_task: dict[str, Run] = {}

        def on_start(run: Run) -> None:
            by_task[run.task_id] = run
            if run.plan.watch and watchers is not None:
                run.watcher = watchers.watch(run.task_id, keys[run.plan.user])

        creator = Creator(
            runs,
            apis,
            concurrency=options.concurrency,
            may_start=may_start,
            on_start=on_start,
            say=say,
        )
        faults = FaultDriver(
            processes,
            schedule,
            rng=fault_rng(options.seed),
            progress=lambda: creator.started / max(1, len(runs)),
            busy_worker=busy_worker_pid,
            started=started,
            say=say,
        )
        approver = Approver(
            apis["operator"],
            by_task,
            seed=options.seed,
            reject_fraction=options.reject_fraction,
            http_keys=records.keys,
        )
        approver.start()
        faults.start()
        creator.start()
        _join(creator, faults)
        for thread, name in ((creator, "the users"), (faults, "the fault driver")):
            if thread.error is not None:
                outcome.errors.append(f"{name} failed: {thread.error!r}")
        outcome.faults = faults.faults
        processes.ensure()
        say("faults over; every process up again")
        settled = settle(
            runs,
            approver,
            options.settle_timeout,
            detail=lambda: _moving(runs),
            say=say,
        )
        mail_left = mail_drained(40.0)
        _catch_up(runs, 20.0)
        approver.stopping.set()
        approver.join(30)
        if approver.error is not None:
            outcome.errors.append(f"the operator failed: {approver.error!r}")
        outcome.invariants = check(
            runs,
            parked=settled.parked,
            http_refs=records.refs,
            mail_dir=Path(env["REACH_VAR_DIR"]) / "mail",
            env=env,
        )
        outcome.counts = _counts(
            options,
            runs,
            settled.parked,
            approver,
            faults.faults,
            apis,
            watchers,
            mail_left,
            len(processes.exits),
            model,
            records,
            started,
        )
    finally:
        if watchers is not None:
            watchers.stop()
        for api in apis.values():
            api.close()
        processes.stop()
        _write_logs(processes, out_dir)
        model.stop()
        records.server.stop()
        with contextlib.suppress(Exception):
            processes.stack.redis.stop()
    return outcome


def _quiet(request: Any, address: Any) -> None:
    return None


def _join(*threads: DriverThread) -> None:
    while any(thread.is_alive() for thread in threads):
        if any(thread.error is not None for thread in threads):
            for thread in threads:
                thread.stopping.set()
        for thread in threads:
            thread.join(0.5)


def _moving(runs: list[Run]) -> str:
    ids = [run.task_id for run in runs if run.task_id]
    rows = Task.objects.filter(pk__in=ids, status__in=Task.ACTIVE).values_list(
        "pk", "status", "lease_owner"
    )
    return "\n".join(f"  {pk} {status} {owner}" for pk, status, owner in rows[:20])


def _catch_up(runs: list[Run], timeout: float) -> None:
    """Give the websocket clients time to receive the last changes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        close_old_connections()
        behind = 0
        for run in runs:
            if run.watcher is None or run.watcher.final:
                continue
            newest = (
                Step.objects.filter(task_id=run.task_id)
                .order_by("-rev")
                .values_list("rev", flat=True)
                .first()
            )
            if newest is not None and run.watcher.last_rev < newest:
                behind += 1
        if not behind:
            return
        time.sleep(0.3)


def _counts(
    options: argparse.Namespace,
    runs: list[Run],
    parked: list[str],
    approver: Approver,
    faults: list[Fault],
    apis: Mapping[str, Api],
    watchers: Watchers,
    mail_left: int,
    exits: int,
    model: ScriptedModel,
    records: RecordingServer,
    started: float,
) -> list[tuple[str, Any]]:
    close_old_connections()
    ids = [run.task_id for run in runs if run.task_id]
    outcomes = Counter(
        f"{status} ({reason})" if reason else status
        for status, reason in Task.objects.filter(pk__in=ids).values_list(
            "status", "stop_reason"
        )
    )
    steps = Step.objects.filter(task_id__in=ids)
    decisions = Counter(d.decision for d in approver.decided)
    edits = sum(
        1
        for a in ApprovalRequest.objects.filter(task_id__in=ids)
        if a.proposed_arguments is not None
    )
    recoveries = ApprovalRequest.objects.filter(
        task_id__in=ids, kind=ApprovalRequest.Kind.RECOVERY
    ).count()
    kinds = Counter(fault.kind for fault in faults)
    aimed = sum(1 for f in faults if "during a write" in f.detail)
    dropped = sum(
        int(f.detail.split()[0]) for f in faults if f.kind is FaultKind.DATABASE
    )
    clients = [run.watcher for run in runs if run.watcher is not None]
    stuck = Outbox.objects.filter(status=Outbox.Status.SENDING).count()
    rows: list[tuple[str, Any]] = [
        ("runs started", len(ids)),
        *((f"  ended {name}", n) for name, n in sorted(outcomes.items())),
        ("  parked for a human (by plan)", len(parked)),
        ("steps recorded", steps.count()),
        ("  tool calls", steps.filter(kind="tool_call").count()),
        ("model requests answered", len(model.requests)),
        ("HTTP write requests received", len(records.keys())),
        ("approvals: approve", decisions["approve"]),
        ("  of them edited first", edits),
        ("approvals: reject", decisions["reject"]),
        ('"did it happen?" requests', recoveries),
        ("  decided mark_done", decisions["mark_done"]),
        ("  decided retry", decisions["retry"]),
        ("worker processes SIGKILLed", kinds[FaultKind.KILL]),
        ("  of them during a write", aimed),
        ("Redis restarts", kinds[FaultKind.REDIS]),
        ("web server restarts", kinds[FaultKind.WEB]),
        ("database connection drops", kinds[FaultKind.DATABASE]),
        ("  connections terminated", dropped),
        ("websocket clients", len(clients)),
        ("  that resumed after a drop", sum(1 for c in clients if c.resumed)),
        ("  sockets opened", sum(c.connections for c in clients)),
        ("product processes that exited on their own (restarted)", exits),
        ("API calls retried", sum(api.retries for api in apis.values())),
        ("mails left pending", mail_left),
        ("mails left 'sending' (reset after 10 min)", stuck),
        ("seconds", round(time.monotonic() - started)),
    ]
    if not options.db_drops:
        rows = [r for r in rows if not r[0].startswith("  connections")]
    return rows


def _write_logs(processes: Processes, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    used: Counter[str] = Counter()
    for proc in processes.history:
        used[proc.name] += 1
        suffix = f".{used[proc.name]}" if used[proc.name] > 1 else ""
        (out_dir / f"{proc.name}{suffix}.log").write_text(proc.output() + "\n")


__all__ = ["run_session"]
