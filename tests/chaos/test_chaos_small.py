"""``make chaos`` in small, inside ``make test``: SQLite, one worker, a few dozen
runs (reads, tickets, mails, HTTP writes, approvals, websocket clients), a
handful of SIGKILLs of the worker at random moments, a Redis restart and a web
server restart under the connected clients.

The same code as ``make chaos`` (``python -m bench.chaos``), in a process of its
own with a scratch instance of its own; every invariant count must be zero.
Dropped database connections (``pg_terminate_backend`` of the product's) need a
server: on PostgreSQL (the ``dbsensitive`` pass, ``DATABASE_URL`` a PostgreSQL
one) the second test runs the same session on a scratch database with them.
A worker that exits when Redis goes away is restarted by the session's
watchdog, as ``make up``'s launcher does (see the README, "What is guaranteed
under faults").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "--database", "sqlite",
    "--workers", "1",
    "--runs", "30",
    "--concurrency", "8",
    "--kills", "4",
    "--redis-restarts", "1",
    "--web-restarts", "1",
    "--seed", "7",
    "--settle-timeout", "60",
]  # fmt: skip


@pytest.mark.integration
@pytest.mark.timeout(250)
def test_a_small_chaos_session_breaks_no_invariant(tmp_path: Path) -> None:
    counts = chaos_session(tmp_path, SMALL, runs=30, kills=4)
    assert counts["database connection drops"] == 0  # SQLite: none to drop


@pytest.mark.integration
@pytest.mark.dbsensitive
@pytest.mark.timeout(250)
def test_a_small_chaos_session_with_dropped_connections_on_postgresql(
    tmp_path: Path,
) -> None:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        pytest.skip("dropped database connections need PostgreSQL (DATABASE_URL)")
    # A scratch database of its own, beside the test database (created, dropped).
    name = f"{os.environ.get('REACH_TEST_DB_NAME') or 'test'}_chaos_small"
    scratch = urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
    # Fewer runs and kills than on SQLite: the drops are what this one adds.
    options = [*SMALL, "--runs", "20", "--kills", "2", "--db-drops", "2"]
    on_postgres = [*options, "--database", "postgres", "--database-url", scratch]
    counts = chaos_session(tmp_path, on_postgres, runs=20, kills=2)
    assert counts["database connection drops"] == 2
    assert counts["connections terminated"] > 0


def chaos_session(
    tmp_path: Path, options: list[str], *, runs: int, kills: int
) -> dict[str, int]:
    """Run ``python -m bench.chaos`` with ``options``; assert every invariant is
    zero and every planned fault struck; return what happened."""
    report = tmp_path / "report.json"
    session = subprocess.Popen(
        [sys.executable, "-m", "bench.chaos", *options]
        + ["--json", str(report), "--out-dir", str(tmp_path / "out")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = session.communicate(timeout=205)
    except subprocess.TimeoutExpired:
        session.terminate()  # on SIGTERM the session stops what it started
        stdout, stderr = session.communicate(timeout=30)
    printed = stdout[-6000:] + stderr[-3000:]
    assert report.exists(), printed
    document = json.loads(report.read_text())
    assert document["errors"] == [], printed
    broken = {name: n for name, n in document["invariants"].items() if n}
    assert broken == {}, printed
    assert len(document["invariants"]) == 16
    counts: dict[str, int] = document["counts"]
    assert counts["runs started"] == runs
    assert counts["worker processes SIGKILLed"] == kills
    assert counts["Redis restarts"] == 1, printed
    assert counts["web server restarts"] == 1, printed
    assert counts["websocket clients"] > 0
    assert session.returncode == 0, printed
    print(stdout[stdout.find("| what happened") :])  # shown by pytest -rA
    return counts
