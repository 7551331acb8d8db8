"""The chaos run itself: users start runs, an operator decides, faults strike.

Imported after ``django.setup()`` (``bench.chaos.cli`` sets the scratch instance
up first). Users and the operator speak to the product only through its API and
websockets, as a browser or a script would; the driver reads the database only
to pace itself, to know what a "did it happen?" request is about (the oracle a
human operator would consult), and to check the invariants afterwards.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import httpx
from django.contrib.auth import get_user_model
from django.db import close_old_connections

from approvals.models import ApprovalRequest
from bench.chaos.plan import (
    HTTP_TOOL,
    HTTP_TOOL_PARAMETERS,
    WRITE_TOOLS,
    RunPlan,
    action_decision,
)
from bench.chaos.threads import DriverThread
from bench.chaos.watch import Watcher
from effects.models import Outbox, Ticket
from engine.spec import FINAL_TASK_STATUSES, StepStatus, TaskStatus
from registry.services import tool_save
from runs.models import Step, Task
from tests.support import extra_tools
from tests.support.clients import bearer_token
from tests.support.http_servers import Hit, LocalServer, Reply
from tests.support.http_tools import http_tool

#: How long a call to the API may keep failing (the web server down, Redis down) before
#: the driver gives up on it.
API_PATIENCE_S = 120.0
#: How long the operator looks into a "did it happen?" request before deciding.
RECOVERY_GRACE_S = 1.0
ACTIVE = (TaskStatus.QUEUED.value, TaskStatus.RUNNING.value)


class ApiDown(RuntimeError):
    """The API kept failing for longer than ``API_PATIENCE_S``."""


@dataclass
class Api:
    """One user's bearer-token client, patient with a product under faults."""

    base_url: str
    token: str
    retries: int = 0

    def __post_init__(self) -> None:
        self.client = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=httpx.Timeout(15, connect=3),
        )

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        accept: tuple[int, ...] = (200, 201, 202),
    ) -> httpx.Response:
        """The response once it has a status in ``accept``; retries transport
        errors, 5xx and 429 (safe here: each call is a read or idempotent)."""
        for _ in self.attempts():
            try:
                response = self.client.request(method, path, json=json)
            except httpx.TransportError:
                continue
            if response.status_code in accept:
                return response
            if response.status_code < 500 and response.status_code != 429:
                raise RuntimeError(
                    f"{method} {path} answered {response.status_code}: "
                    f"{response.text[:300]}"
                )
        raise AssertionError("unreachable")

    def attempts(self) -> Iterator[int]:
        deadline = time.monotonic() + API_PATIENCE_S
        for attempt in range(10_000):
            if attempt:
                self.retries += 1
                if time.monotonic() > deadline:
                    raise ApiDown(f"the API at {self.base_url} kept failing")
                time.sleep(min(1.0, 0.1 * attempt))
            yield attempt
        raise ApiDown("too many attempts")

    def post_message(self, conversation: str, content: str) -> str:
        """Start a run; after a lost answer, adopt the task the post made."""
        path = f"/api/conversations/{conversation}/messages/"
        for attempt in self.attempts():
            if attempt:
                made = self.task_of(conversation)
                if made:
                    return made
            try:
                response = self.client.post(path, json={"content": content})
            except httpx.TransportError:
                continue
            if response.status_code in (202, 409):
                return str(response.json()["task"])
            if response.status_code < 500 and response.status_code != 429:
                raise RuntimeError(f"POST {path}: {response.status_code}")
        raise AssertionError("unreachable")

    def task_of(self, conversation: str) -> str | None:
        messages = self.call("GET", f"/api/conversations/{conversation}/").json()
        return next(
            (m["task"] for m in messages["messages"] if m["role"] == "user"), None
        )

    def close(self) -> None:
        self.client.close()


@dataclass
class Run:
    plan: RunPlan
    task_id: str = ""
    conversation: str = ""
    watcher: Watcher | None = None


@dataclass
class Decided:
    """One decision the operator posted."""

    approval: str
    task: str
    step: int
    tool: str
    kind: str
    decision: str
    status_code: int


# -- set-up ----------------------------------------------------------------------


class RecordingServer:
    """The loopback HTTP server ``record_write`` posts to; keeps every request."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(f"{seed}:http-latency")
        self.lock = threading.Lock()
        self.server = LocalServer(self.respond)

    def respond(self, hit: Hit) -> Reply:
        # Slow enough that a kill can land while the request is in flight.
        with self.lock:
            pause = self.rng.uniform(0.05, 0.4)
        time.sleep(pause)
        return Reply(data={"recorded": True})

    def keys(self) -> list[str]:
        """The Idempotency-Key of every request received, in order."""
        return [hit.headers.get("idempotency-key", "") for hit in self.server.hits]

    def refs(self) -> list[tuple[str, str]]:
        """``(ref, key)`` of every request received."""
        out = []
        for hit in list(self.server.hits):
            try:
                body = hit.json()
            except ValueError:
                body = {}
            out.append((str(body.get("ref")), hit.headers.get("idempotency-key", "")))
        return out


def install_tools(records_url: str) -> None:
    """The slow read and the HTTP write, offered to the demo agent (tag demo)."""
    extra_tools.install("slow_lookup", timeout_s=10)
    tool = http_tool(
        records_url,
        name=HTTP_TOOL,
        method="POST",
        body={"ref": "{ref}"},
        parameters=HTTP_TOOL_PARAMETERS,
        risk="write",
        tags=["demo"],
        timeout_s=10.0,
    )
    tool.description = (
        "Record a reference in the team's audit service over HTTP. Changes: adds "
        "one record."
    )
    tool_save(tool=tool)


def tokens(usernames: tuple[str, ...]) -> dict[str, str]:
    """A fresh API token for each user."""
    users = get_user_model().objects
    return {name: bearer_token(users.get(username=name), "chaos") for name in usernames}


# -- pacing and the oracle ---------------------------------------------------------


def busy_worker_pid() -> int | None:
    """The pid of a worker that is running a write right now, if any."""
    close_old_connections()
    owner = (
        Step.objects.filter(
            status=StepStatus.RUNNING,
            started_at__isnull=False,
            tool__in=list(WRITE_TOOLS),
            task__status=TaskStatus.RUNNING,
        )
        .values_list("task__lease_owner", flat=True)
        .first()
    )
    try:
        return int(str(owner).split(":")[-2]) if owner else None
    except ValueError:
        return None


def effect_happened(tool: str, key: str, http_keys: Callable[[], list[str]]) -> bool:
    """Whether the write with ``key`` took effect: what an operator checks before
    answering "did it happen?"."""
    if tool == "create_ticket":
        return Ticket.objects.filter(idempotency_key=key).exists()
    if tool == "send_email":
        return Outbox.objects.filter(idempotency_key=key).exists()
    if tool == HTTP_TOOL:
        return key in http_keys()
    raise ValueError(f"no oracle for {tool}")


# -- the users and the operator ----------------------------------------------------


@dataclass(eq=False, repr=False)
class Creator(DriverThread):
    """Starts every planned run through the API, ``concurrency`` at a time.

    ``may_start(number)`` holds a run back until the faults planned before it
    have begun, so the faults land among runs in flight, however fast either is.
    """

    thread_name = "chaos-creator"

    runs: list[Run]
    apis: dict[str, Api]
    _: KW_ONLY
    concurrency: int
    may_start: Callable[[int], bool]
    on_start: Callable[[Run], None]
    say: Callable[[str], None]
    started: int = field(default=0, init=False)

    def work(self) -> None:
        for run in self.runs:
            while not self.stopping.is_set() and (
                self.active() >= self.concurrency or not self.may_start(run.plan.number)
            ):
                time.sleep(0.1)
            if self.stopping.is_set():
                return
            api = self.apis[run.plan.user]
            run.conversation = str(
                api.call("POST", "/api/conversations/", json={}).json()["id"]
            )
            run.task_id = api.post_message(run.conversation, run.plan.goal)
            self.started += 1
            self.on_start(run)
            if self.started % 10 == 0 or self.started == len(self.runs):
                self.say(f"{self.started} of {len(self.runs)} runs started")

    def done(self) -> None:
        close_old_connections()

    def active(self) -> int:
        close_old_connections()
        ids = [run.task_id for run in self.runs if run.task_id]
        return Task.objects.filter(pk__in=ids, status__in=ACTIVE).count()


@dataclass(eq=False, repr=False)
class Approver(DriverThread):
    """The operator: decides pending requests through the API.

    Action approvals get approve, edit-then-approve or reject by the seed;
    "did it happen?" requests get mark done when the write took effect and retry
    when it did not. Runs planned to park are left waiting for a human.
    """

    thread_name = "chaos-approver"

    api: Api
    runs: dict[str, Run]
    _: KW_ONLY
    seed: int
    reject_fraction: float
    http_keys: Callable[[], list[str]]
    decided: list[Decided] = field(default_factory=list, init=False)
    seen: dict[str, float] = field(default_factory=dict, init=False)
    handled: set[str] = field(default_factory=set, init=False)
    idle: threading.Event = field(default_factory=threading.Event, init=False)

    def work(self) -> None:
        while not self.stopping.is_set():
            pending = self.api.call(
                "GET", "/api/approvals/?status=pending&limit=200"
            ).json()
            acted = [self.consider(approval) for approval in pending]
            if any(acted):
                self.idle.clear()
            else:
                self.idle.set()
            self.stopping.wait(0.2)

    def done(self) -> None:
        close_old_connections()

    def consider(self, approval: dict[str, Any]) -> bool:
        """Decide ``approval`` if it is the operator's to decide; True if it was
        (or will be, after the grace of a recovery request)."""
        ident = str(approval["id"])
        run = self.runs.get(str(approval["task"]))
        if ident in self.handled or run is None or run.plan.park:
            return False
        if approval.get("kind") == ApprovalRequest.Kind.RECOVERY:
            first = self.seen.setdefault(ident, time.monotonic())
            if time.monotonic() - first < RECOVERY_GRACE_S:
                return True
            body = self.recovery_decision(approval)
        else:
            choice = action_decision(
                self.seed,
                run.plan.number,
                int(approval["step"]),
                str(approval["tool"]),
                approval["arguments"] or {},
                reject_fraction=self.reject_fraction,
            )
            body = {"decision": choice.decision}
            if choice.arguments is not None:
                body["arguments"] = choice.arguments
            if choice.reason:
                body["reason"] = choice.reason
        response = self.api.call(
            "POST",
            f"/api/approvals/{ident}/decision/",
            json=body,
            accept=(200, 400, 409),
        )
        self.handled.add(ident)
        self.decided.append(
            Decided(
                approval=ident,
                task=str(approval["task"]),
                step=int(approval["step"]),
                tool=str(approval["tool"]),
                kind=str(approval.get("kind")),
                decision=str(body["decision"]),
                status_code=response.status_code,
            )
        )
        return True

    def recovery_decision(self, approval: dict[str, Any]) -> dict[str, Any]:
        close_old_connections()
        key = (
            Step.objects.filter(task_id=approval["task"], seq=approval["step"])
            .values_list("idempotency_key", flat=True)
            .first()
        )
        happened = effect_happened(str(approval["tool"]), key or "", self.http_keys)
        return {"decision": "mark_done" if happened else "retry"}


# -- settling ------------------------------------------------------------------------


@dataclass
class Settled:
    """Where the runs stand once the faults are over."""

    final: list[str] = field(default_factory=list)
    parked: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)


def standing(runs: list[Run]) -> Settled:
    """Final runs, runs parked on a pending request, and the rest."""
    close_old_connections()
    ids = [run.task_id for run in runs if run.task_id]
    statuses = {
        str(pk): status
        for pk, status in Task.objects.filter(pk__in=ids).values_list("pk", "status")
    }
    waiting = {
        str(pk)
        for pk in ApprovalRequest.objects.filter(
            task_id__in=ids, status=ApprovalRequest.Status.PENDING
        ).values_list("task_id", flat=True)
    }
    out = Settled()
    for run in runs:
        if not run.task_id:
            out.other.append(f"run {run.plan.number} (never started)")
            continue
        status = statuses.get(run.task_id)
        if status in FINAL_TASK_STATUSES:
            out.final.append(run.task_id)
        elif status == TaskStatus.WAITING_APPROVAL and run.task_id in waiting:
            out.parked.append(run.task_id)
        else:
            out.other.append(run.task_id)
    return out


def settle(
    runs: list[Run],
    approver: Approver,
    timeout: float,
    *,
    detail: Callable[[], str],
    say: Callable[[str], None],
) -> Settled:
    """Wait until every run is final, or parked for a human by its plan."""
    parked_by_plan = {run.task_id for run in runs if run.plan.park}
    deadline = time.monotonic() + timeout
    next_word = 0.0
    while True:
        now = standing(runs)
        done = not now.other and set(now.parked) <= parked_by_plan
        if done and approver.idle.is_set():
            return now
        if time.monotonic() > deadline:
            say(f"runs still moving after {timeout:g} s:\n{detail()}")
            return now
        if time.monotonic() > next_word:
            say(
                f"settling: {len(now.final)} final, {len(now.parked)} parked, "
                f"{len(now.other)} moving"
            )
            next_word = time.monotonic() + 10
        time.sleep(0.5)


def mail_drained(timeout: float) -> int:
    """Wait (for the beat dispatcher) until no mail is pending; the rest left."""
    deadline = time.monotonic() + timeout
    while True:
        close_old_connections()
        left = Outbox.objects.filter(status=Outbox.Status.PENDING).count()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)
