"""``make chaos`` in small, inside ``make test``: SQLite, one worker, a few dozen
runs (reads, tickets, mails, HTTP writes, approvals, websocket clients), a
handful of SIGKILLs of the worker at random moments.

The same code as ``make chaos`` (``python -m bench.chaos``), in a process of its
own with a scratch instance of its own; every invariant count must be zero.
Redis and web server restarts stay in ``make chaos``: they still break invariants
(see the README, "What is guaranteed under faults").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "--database", "sqlite",
    "--workers", "1",
    "--runs", "30",
    "--concurrency", "8",
    "--kills", "4",
    "--redis-restarts", "0",
    "--web-restarts", "0",
    "--seed", "7",
    "--settle-timeout", "60",
]  # fmt: skip


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_a_small_chaos_session_breaks_no_invariant(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    session = subprocess.Popen(
        [sys.executable, "-m", "bench.chaos", *SMALL]
        + ["--json", str(report), "--out-dir", str(tmp_path / "out")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = session.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        session.terminate()  # on SIGTERM the session stops what it started
        stdout, stderr = session.communicate(timeout=60)
    printed = stdout[-6000:] + stderr[-3000:]
    assert report.exists(), printed
    document = json.loads(report.read_text())
    assert document["errors"] == [], printed
    broken = {name: n for name, n in document["invariants"].items() if n}
    assert broken == {}, printed
    assert len(document["invariants"]) == 16
    counts = document["counts"]
    assert counts["runs started"] == 30
    assert counts["worker processes SIGKILLed"] == 4
    assert counts["websocket clients"] > 0
    assert session.returncode == 0, printed
    print(stdout[stdout.find("| what happened") :])  # shown by pytest -rA
