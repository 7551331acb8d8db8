"""``make bench``: platform overhead per step, and 200 concurrent tasks.

Runs everything on this machine, on the embedded defaults (SQLite in WAL mode in a
temporary ``var/``, the bundled Redis), against the scripted model server in its
own process (``bench.model_server``), through the real ``openai`` SDK:

1. **Per-step overhead.** A zero-latency model answers N-1 ``calculate`` calls and
   then a text answer. The runner drives T such tasks one after another in this
   process (``task_advance``: engine, database, pushes, SDK). Next to it a bare
   openai-SDK loop makes the same number of model calls with the same tools
   against the same server. Both subtract the server's own time per request
   (reported by the server), and the difference is the platform's cost.
2. **200 concurrent tasks.** A real Celery worker subprocess (threads pool,
   concurrency 200) runs 200 demo tasks (3 model calls each) against a model with
   200 ms latency; the wall time from the first enqueue to the last final task is
   compared with the ideal (model calls per task x latency).

Prints medians and ratios; no target is asserted. Options: ``--help``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from infra.processes import spawn
from tests.support.redis_server import BundledRedis

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "项目笔记里哪个方案提到 Redis？找到其中的预算表达式并计算总和。"


class Proc:
    """A child process whose output lines are collected by a thread."""

    def __init__(self, name: str, argv: Sequence[str], env: dict[str, str]) -> None:
        self.name = name
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self.process = spawn(argv, cwd=ROOT, env=env, on_line=self._line)

    def _line(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)

    def wait_line(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                found = next((line for line in self.lines if text in line), None)
            if found is not None:
                return found
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        tail = "\n".join(self.lines[-30:])
        raise RuntimeError(f"{self.name} did not say {text!r}:\n{tail}")

    def take_timings(self) -> list[float]:
        """The server's own times (ms) reported since the last call."""
        with self._lock:
            values = [float(line[2:]) for line in self.lines if line.startswith("T ")]
            self.lines = [line for line in self.lines if not line.startswith("T ")]
        return values

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)


def wait_until(predicate: Callable[[], bool], timeout: float, poll: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark did not finish in time")
        time.sleep(poll)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def p90(values: Sequence[float]) -> float:
    if len(values) < 2:
        return median(values)
    return statistics.quantiles(values, n=10)[-1]


def start_model(env: dict[str, str], *args: str) -> tuple[Proc, str]:
    proc = Proc("model", [sys.executable, "-m", "bench.model_server", *args], env)
    url = proc.wait_line("READY", 30).split()[-1]
    return proc, url


# -- setup -------------------------------------------------------------------------


def prepare(
    var_dir: Path, database_url: str | None = None
) -> tuple[Any, dict[str, str]]:
    """Environment, Redis, database: returns the Redis server and the child env.

    The database is a scratch SQLite file under ``var_dir`` unless ``database_url``
    names one (e.g. an empty PostgreSQL database for the scale-out runs).
    """
    redis_server = BundledRedis().start()
    env = {
        **os.environ,
        "REACH_VAR_DIR": str(var_dir),
        "REDIS_URL": redis_server.url,
        "OPENAI_API_KEY": "bench-key",
        "OPENAI_MODEL": "scripted-model",
        "REACH_DEMO_PASSWORD": "bench-password-1234",
        "REACH_LOG_LEVEL": "WARNING",
        "REACH_MODEL_MAX_RETRIES": "0",
        "PYTHONUNBUFFERED": "1",
        "DJANGO_SETTINGS_MODULE": "reach_site.settings",
    }
    for name in ("DATABASE_URL", "OPENAI_BASE_URL", "REACH_TEST_DB_NAME"):
        env.pop(name, None)
    if database_url:
        env["DATABASE_URL"] = database_url
    os.environ.clear()
    os.environ.update(env)
    # The settings read the environment just set: only now may Django start, and
    # only then the product's modules load (bench.inproc).
    import django

    django.setup()
    from bench import inproc

    inproc.seed()
    return redis_server, env


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


# -- report ------------------------------------------------------------------------


def report(
    one: dict[str, Any] | None,
    two: list[dict[str, Any]],
    floor: dict[str, Any] | None,
) -> str:
    cores = os.cpu_count()
    database = "PostgreSQL" if os.environ.get("DATABASE_URL") else "SQLite (WAL)"
    out = [f"Agent Reach benchmark · {cores} cores · {database} + bundled Redis"]
    if one:
        out += [
            "",
            f"1. Per-step overhead, zero-latency model, {one['tasks']} tasks x "
            f"{one['steps_per_task']} model calls (medians)",
            f"   platform step          {one['platform_step_ms']:7.2f} ms"
            f"  (p90 {one['platform_step_p90_ms']:.2f})",
            f"   bare openai-SDK step   {one['bare_step_ms']:7.2f} ms"
            f"  (p90 {one['bare_step_p90_ms']:.2f})",
            f"   model server's own time {one['server_ms_platform_run']:6.2f} ms"
            f" (platform run) / {one['server_ms_bare_run']:.2f} ms (bare run)",
            f"   platform overhead      {one['platform_overhead_ms']:7.2f} ms per step",
            f"   bare loop overhead     {one['bare_overhead_ms']:7.2f} ms per step",
            f"   difference             {one['difference_ms']:7.2f} ms per step"
            "  (target: within 6 ms)",
        ]
    for run in two:
        out += [
            "",
            f"2. {run['tasks']} concurrent tasks, {run['latency_s'] * 1000:.0f} ms"
            f" model, {run['workers']} worker process(es) x"
            f" {run['threads_per_worker']} threads",
            f"   model calls per task   {run['model_calls_per_task']:.0f}",
            f"   wall time              {run['wall_s']:7.2f} s",
            f"   ideal (calls x latency){run['ideal_s']:7.2f} s",
            f"   ratio                  {run['ratio']:7.2f} x  (target: within 1.5 x)",
            f"   outcomes               {run['statuses']}",
            f"   worker CPU             {run['worker_cpu_s']:7.2f} s"
            f"  ({run['worker_cpu_ms_per_task']:.1f} ms per task)",
        ]
    if floor:
        out += [
            "",
            f"   floor: the same calls from bare openai-SDK loops, {floor['tasks']} "
            "threads in one process",
            f"   wall time              {floor['wall_s']:7.2f} s"
            f"  (ratio {floor['ratio']:.2f} x, CPU {floor['cpu_s']:.2f} s)",
        ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30, help="tasks for part 1")
    parser.add_argument("--steps", type=int, default=10, help="model calls per task")
    parser.add_argument("--concurrent", type=int, default=200, help="tasks, part 2")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds, part 2")
    parser.add_argument("--concurrency", type=int, default=200, help="worker threads")
    parser.add_argument(
        "--workers",
        default="1,2",
        help="worker processes for part 2, comma-separated runs (default 1,2)",
    )
    parser.add_argument("--only", choices=["overhead", "concurrent"], default=None)
    parser.add_argument(
        "--database-url",
        default=None,
        help="an empty database to run on (default: scratch SQLite)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON as well")
    options = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="reach-bench-") as tmp:
        redis_server, env = prepare(Path(tmp), options.database_url)
        from bench import inproc  # loaded by prepare, once Django was set up

        try:
            one = floor = None
            two: list[dict[str, Any]] = []
            if options.only in (None, "overhead"):
                one = inproc.overhead(env, options.tasks, options.steps)
            if options.only in (None, "concurrent"):
                for workers in (int(w) for w in options.workers.split(",")):
                    two.append(
                        inproc.concurrent(
                            env,
                            options.concurrent,
                            options.latency,
                            options.concurrency,
                            workers,
                        )
                    )
                calls = int(two[0]["model_calls_per_task"])
                floor = inproc.bare_concurrent(
                    env, options.concurrent, options.latency, calls
                )
                floor["tasks"] = options.concurrent
        finally:
            redis_server.stop()
    print(report(one, two, floor))
    if options.json:
        print(
            json.dumps({"overhead": one, "concurrent": two, "floor": floor}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
