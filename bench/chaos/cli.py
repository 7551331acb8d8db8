"""``python -m bench.chaos``: the command line of ``make chaos``.

Makes a scratch instance (its own ``REACH_VAR_DIR``, its own bundled Redis, a
PostgreSQL database created for the run and dropped after it, or a scratch
SQLite file), runs one chaos session on it, prints the seed, what happened and
the invariants, and exits 1 when any invariant count is not zero (2 when the
session itself could not run).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from bench.chaos.faults import DRIVER_APP, PRODUCT_APP
from bench.chaos.report import Outcome, report_document, report_text
from bench.run import prepare

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PG_URL = "postgres://postgres@127.0.0.1:5432/reach_chaos"
#: The settings every product process of a session runs with: short leases, so
#: a killed worker's runs are taken over within seconds; the test tools.
PRODUCT_ENV = {
    "REACH_LEASE_S": "4",
    "REACH_HEARTBEAT_S": "1",
    "REACH_REAPER_INTERVAL_S": "1",
    "REACH_QUEUED_GRACE_S": "3",
    "REACH_EXTRA_TOOL_MODULES": "tests.support.extra_tools",
    "REACH_API_RATE": "100000/min",
    "REACH_MODEL_MAX_RETRIES": "0",
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.chaos", description=__doc__.splitlines()[0]
    )
    p.add_argument("--seed", type=int, default=1, help="reproduces a session")
    p.add_argument("--database", choices=("postgres", "sqlite"), default="postgres")
    p.add_argument(
        "--database-url",
        default=DEFAULT_PG_URL,
        help="PostgreSQL: this database is created, used and dropped",
    )
    p.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    p.add_argument("--threads", type=int, default=8, help="threads per worker")
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=12, help="runs in flight")
    p.add_argument("--kills", type=int, default=12, help="workers SIGKILLed")
    p.add_argument("--redis-restarts", type=int, default=3)
    p.add_argument("--web-restarts", type=int, default=3, help="web server restarts")
    p.add_argument(
        "--db-drops",
        type=int,
        default=None,
        help="pg_terminate_backend rounds (default 6; none on SQLite)",
    )
    p.add_argument("--watch-fraction", type=float, default=0.5, help="of runs")
    p.add_argument("--park-fraction", type=float, default=0.05, help="of runs")
    p.add_argument("--reject-fraction", type=float, default=0.15, help="of approvals")
    p.add_argument("--model-latency-min", type=float, default=0.05)
    p.add_argument("--model-latency-max", type=float, default=0.4)
    p.add_argument("--settle-timeout", type=float, default=240.0, help="seconds")
    p.add_argument("--out-dir", help="logs and report (default var/chaos/<stamp>)")
    p.add_argument("--json", dest="json_path", help="also write the report here")
    p.add_argument("--keep", action="store_true", help="keep the scratch instance")
    return p


class Database:
    """The session's database: a PostgreSQL one made for it, or scratch SQLite."""

    def __init__(self, options: argparse.Namespace) -> None:
        self.postgres = options.database == "postgres"
        self.url = options.database_url
        parts = urlsplit(self.url)
        self.name = parts.path.lstrip("/")
        self.admin_url = urlunsplit(parts._replace(path="/postgres"))

    def _admin(self, *statements: sql.Composed) -> None:
        with psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5) as c:
            for statement in statements:
                c.execute(statement)

    def create(self) -> None:
        if self.postgres:
            name = sql.Identifier(self.name)
            self._admin(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name),
                sql.SQL("CREATE DATABASE {}").format(name),
            )

    def drop(self) -> None:
        if self.postgres:
            name = sql.Identifier(self.name)
            self._admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))

    def url_for(self, application: str) -> str | None:
        """The DATABASE_URL of one side (None: the scratch SQLite file)."""
        if not self.postgres:
            return None
        joiner = "&" if "?" in self.url else "?"
        return f"{self.url}{joiner}application_name={application}"

    def describe(self) -> str:
        return f"PostgreSQL ({self.name})" if self.postgres else "SQLite (WAL)"


def _interrupted(signum: int, frame: object) -> None:
    # SIGTERM (a timeout, Ctrl-C from make) still runs the clean-up below: the
    # product's processes live in sessions of their own and would outlive us.
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _interrupted)
    options = parser().parse_args(argv)
    if options.db_drops is None or options.database == "sqlite":
        options.db_drops = 6 if options.database == "postgres" else 0
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = Path(
        options.out_dir or ROOT / "var" / "chaos" / f"{stamp}-seed{options.seed}"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    database = Database(options)
    scratch = Path(tempfile.mkdtemp(prefix="reach-chaos-"))
    print(header(options, database), flush=True)
    try:
        outcome = session(options, database, scratch, out_dir)
    except Exception as exc:  # noqa: BLE001 - reported below; the logs stay
        traceback.print_exc()
        outcome = Outcome(errors=[f"the session could not run: {exc!r}"])
    finally:
        close_database()
        if options.keep:
            print(f"kept the scratch instance: {scratch} ({database.describe()})")
        else:
            database.drop()
            shutil.rmtree(scratch, ignore_errors=True)
    text = report_text(options.seed, outcome)
    print(text, flush=True)
    print(f"logs and report: {out_dir}")
    (out_dir / "report.md").write_text(text + "\n")
    document = json.dumps(report_document(options, outcome), indent=1, default=str)
    for path in filter(None, (options.json_path, out_dir / "report.json")):
        Path(path).write_text(document + "\n")
    if outcome.errors and not outcome.invariants:
        return 2
    return 0 if outcome.passed else 1


def session(
    options: argparse.Namespace, database: Database, scratch: Path, out_dir: Path
) -> Outcome:
    """Set the scratch instance up and run one session on it."""
    database.create()
    redis, env = prepare(scratch, database.url_for(DRIVER_APP))
    env.update(PRODUCT_ENV)
    env["REACH_WORKER_CONCURRENCY"] = str(options.threads)
    env["REACH_DB_POOL_MAX"] = str(options.threads + 8)
    product_url = database.url_for(PRODUCT_APP)
    if product_url:
        env["DATABASE_URL"] = product_url
    # Models can be imported only now that prepare() has set Django up.
    from bench.chaos.session import run_session

    return run_session(
        options,
        env,
        redis,
        postgres_url=database.url if database.postgres else None,
        out_dir=out_dir,
    )


def close_database() -> None:
    """Close this process's pooled connections before the database is dropped."""
    if "django" not in sys.modules:
        return
    from django.db import connections

    for conn in connections.all():
        close_pool = getattr(conn, "close_pool", None)
        if close_pool is not None and conn.settings_dict.get("OPTIONS", {}).get("pool"):
            close_pool()
        conn.close()


def header(options: argparse.Namespace, database: Database) -> str:
    defaults = vars(parser().parse_args([]))
    defaults["db_drops"] = 6 if options.database == "postgres" else 0
    again = ["--seed", str(options.seed), "--database", options.database]
    for action in parser()._actions:
        name, value = action.dest, getattr(options, action.dest, None)
        if name in ("help", "seed", "database", "out_dir", "json_path", "keep"):
            continue
        if value != defaults.get(name) and action.option_strings:
            again += [action.option_strings[0], str(value)]
    return (
        f"Agent Reach chaos · seed {options.seed} · {database.describe()} · "
        f"{options.workers} worker(s) x {options.threads} threads · "
        f"{options.runs} runs, {options.concurrency} in flight · "
        f"{os.cpu_count()} cores\n"
        f"reproduce: python -m bench.chaos {shlex.join(again)}"
    )
