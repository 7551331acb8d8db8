"""A backup of the product while it runs, restored into a fresh install.

The real processes (web, a Celery worker, beat) run on the test's SQLite
database; runs go on while ``manage.py backup`` copies it from another process:
some are mid-model-call (their worker holds the lease), one is parked on an
approval, and new ones keep arriving and writing. The archive is restored into
a fresh var directory and database, with its own Redis; there the runs show in
the API, the in-flight ones resume and finish, the parked approval is decided
and its run finishes, and ``manage.py verify_audit`` passes.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from runs.models import Task
from tests.support.cast import QUESTION
from tests.support.clients import bearer_headers
from tests.support.redis_server import BundledRedis
from tests.support.replies import (
    AnyReply,
    RecordingHandler,
    delay,
    hang,
    text,
    tool_call,
)
from tests.support.scripted_model import RedisScript, ScriptedModel, this_turn
from tests.support.stack import ROOT, Stack, ask_over_api
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.integration]

SHORT_LEASES = {
    "REACH_LEASE_S": "3",
    "REACH_HEARTBEAT_S": "1",
    "REACH_REAPER_INTERVAL_S": "1",
    "REACH_QUEUED_GRACE_S": "2",
}
MAIL = {"to": "ops@example.com", "subject": "Budget", "body": "The total is 1088."}


class Plan(RecordingHandler):
    """ "mail …" proposes ``send_email`` (always approved by a human); "slow …"
    hangs while ``hold`` (a run caught mid-model-call); anything else is the demo
    question, a little slowly, so workers keep writing."""

    def __init__(self, *, hold: bool) -> None:
        super().__init__()
        self.hold = hold
        self.demo = RedisScript()

    def respond(self, request: dict[str, Any]) -> AnyReply:
        turn = this_turn(request)
        question = turn[2] if turn else ""
        answered = turn is not None and any(
            m.get("role") == "tool" for m in turn[0][turn[1] + 1 :]
        )
        if question.startswith("mail"):
            if answered:
                return text("Sent the budget to ops.")
            return tool_call("send_email", MAIL)
        if question.startswith("slow"):
            return hang() if self.hold else text("The slow answer.")
        return delay(0.05, self.demo.respond(request))


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_backup_of_the_running_product_restores_into_a_fresh_install(
    stack: Stack, alice, operator, tmp_path: Path
):
    model = ScriptedModel(Plan(hold=True)).start()
    stack.env.update(SHORT_LEASES, OPENAI_BASE_URL=model.base_url)
    stack.start_worker(concurrency=8)
    stack.start_web()
    alice_headers = bearer_headers(alice)
    operator_headers = bearer_headers(operator)
    http = stack.api(alice_headers)
    staff = stack.api(operator_headers)

    mail_task = ask_over_api(http, "mail ops the budget")
    slow_tasks = [ask_over_api(http, f"slow question {n}") for n in range(3)]
    finished_before = ask_over_api(http, QUESTION)

    def pending_approval() -> dict | None:
        pending = staff.get("/api/approvals/?status=pending").json()
        return next((a for a in pending if a["task"] == mail_task), None)

    approval = wait_for(pending_approval, 60, what="the mail's approval request")
    wait_for(
        lambda: all(
            http.get(f"/api/tasks/{t}/").json()["status"] == "running"
            for t in slow_tasks
        ),
        60,
        what="the slow runs, running (their model call hangs)",
    )
    wait_for(
        lambda: (
            http.get(f"/api/tasks/{finished_before}/").json()["status"] == "succeeded"
        ),
        60,
        what="the demo question answered",
    )

    # Runs keep arriving and writing while the backup is taken.
    stop_writing = threading.Event()
    written: list[str] = []

    def keep_asking() -> None:
        with stack.api(alice_headers) as client:
            while not stop_writing.is_set():
                written.append(ask_over_api(client, QUESTION))

    writer = threading.Thread(target=keep_asking, daemon=True)
    writer.start()
    wait_for(lambda: len(written) >= 2, 30, what="runs started meanwhile")
    archive = tmp_path / "reach.backup"
    made = manage(stack.env, "backup", str(archive))
    stop_writing.set()
    writer.join(30)
    assert made.returncode == 0, made.stderr
    assert "Backed up sqlite" in made.stdout
    assert "DJANGO_SECRET_KEY" in made.stdout and "REACH_SECRETS_KEY" in made.stdout

    # The old install goes away (its worker killed mid-call, as in a crash).
    stack.procs["worker"].kill()
    stack.stop()
    model.stop()

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    redis = BundledRedis().start()
    model = ScriptedModel(Plan(hold=False)).start()
    try:
        env = {
            **stack.env,
            "DATABASE_URL": f"sqlite:///{fresh / 'reach.sqlite3'}",
            "REACH_VAR_DIR": str(fresh),
            "REDIS_URL": redis.url,
            "OPENAI_BASE_URL": model.base_url,
        }
        restored_out = manage(env, "restore", str(archive))
        assert restored_out.returncode == 0, restored_out.stderr
        assert "Restored. The audit chain verifies" in restored_out.stdout

        restored = Stack(env=env, redis=redis)
        try:
            restored.start_beat()
            restored.start_worker(concurrency=8)
            restored.start_web()
            http = restored.api(alice_headers)
            staff = restored.api(operator_headers)

            # The runs show, through the API, with the tokens of the old install.
            listed = {t["id"]: t for t in http.get("/api/tasks/?limit=200").json()}
            assert {mail_task, finished_before, *slow_tasks} <= set(listed)
            assert listed[finished_before]["status"] == "succeeded"
            steps = http.get(f"/api/tasks/{finished_before}/steps/").json()["steps"]
            assert [s["tool"] for s in steps if s["kind"] == "tool_call"] == [
                "search_notes",
                "calculate",
            ]
            assert listed[mail_task]["status"] == "waiting_approval"
            # Nothing torn: every restored run's steps are whole, seq after seq.
            for task_id in listed:
                seqs = [
                    s["seq"]
                    for s in http.get(f"/api/tasks/{task_id}/steps/").json()["steps"]
                ]
                assert sorted(seqs) == list(range(1, len(seqs) + 1)), task_id

            # The parked approval can be decided, and its run finishes.
            decided = staff.post(
                f"/api/approvals/{approval['id']}/decision/",
                json={"decision": "approve"},
            )
            assert decided.status_code == 200, decided.text
            assert decided.json()["status"] == "approved"

            def final(task_id: str) -> dict | None:
                task = http.get(f"/api/tasks/{task_id}/").json()
                return task if task["status"] not in Task.ACTIVE else None

            mailed = wait_for(lambda: final(mail_task), 60, what="the mail run")
            assert mailed["status"] == "succeeded", mailed
            assert mailed["final_answer"] == "Sent the budget to ops."
            # The runs caught mid-call resume on the new install (their lease
            # expires, beat re-queues them) and finish.
            for task_id in slow_tasks:
                done = wait_for(lambda t=task_id: final(t), 60, what="a slow run")
                assert done["status"] == "succeeded", done
                assert done["final_answer"] == "The slow answer."
        finally:
            restored.stop()

        verified = manage(env, "verify_audit")
        assert verified.returncode == 0, verified.stderr
        assert "The hash chain is intact." in verified.stdout
    finally:
        model.stop()
        redis.stop()
