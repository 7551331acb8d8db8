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
from unittest import mock

from infra.processes import spawn

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
    sys.path.insert(0, str(ROOT))
    from tests.support.redis_server import BundledRedis

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
    import django

    django.setup()
    from django.core.management import call_command

    from reach_site.demo import seed_demo

    call_command("migrate", verbosity=0)
    seed_demo()
    return redis_server, env


def use_model(url: str) -> None:
    from django.conf import settings

    settings.OPENAI_BASE_URL = url


# -- 1. per-step overhead ----------------------------------------------------------


def platform_loop(model: Proc, tasks: int, steps: int) -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    from registry.models import Agent
    from runs import services as runs
    from runs.models import Task

    alice = get_user_model().objects.get(username="alice")
    agent = Agent.objects.get(name="assistant")
    per_step: list[float] = []
    # Warm up: imports, connections, template loading.
    for _ in range(3):
        conversation = runs.conversation_create(owner=alice, agent=agent)
        task = runs.task_start(conversation=conversation, content="warm up")
        runs.task_advance(task_id=task.pk)
    model.take_timings()
    with mock.patch.object(runs, "enqueue_advance"):
        ids = []
        for number in range(tasks):
            conversation = runs.conversation_create(owner=alice, agent=agent)
            task = runs.task_start(conversation=conversation, content=f"run {number}")
            ids.append(task.pk)
    for task_id in ids:
        started = time.perf_counter()
        runs.task_advance(task_id=task_id)
        elapsed = time.perf_counter() - started
        done = Task.objects.get(pk=task_id)
        assert done.status == "succeeded", (done.status, done.error_message)
        calls = done.steps.filter(kind="model_call").count()
        assert calls == steps, calls
        per_step.append(elapsed * 1000 / calls)
    server = model.take_timings()
    return {"per_step_ms": per_step, "server_ms": server}


class BareAgent:
    """The loop without the platform: the openai SDK, the same tools, no records."""

    def __init__(self, url: str, connections: int = 100) -> None:
        import httpx2
        import openai

        from engine.safe_eval import evaluate_arithmetic
        from engine.spec import ToolSpec
        from registry.models import Agent
        from registry.services import agent_snapshot

        snapshot = agent_snapshot(Agent.objects.get(name="assistant"))
        self.instructions = snapshot["instructions"]
        self.tools = [
            ToolSpec.from_definition(d).openai_tool() for d in snapshot["tools"]
        ]
        self.evaluate = evaluate_arithmetic
        limits = httpx2.Limits(
            max_connections=connections, max_keepalive_connections=connections
        )
        self.client = openai.OpenAI(
            base_url=url,
            api_key="bench-key",
            max_retries=0,
            http_client=openai.DefaultHttpx2Client(limits=limits),
        )

    def run(self, number: int) -> int:
        """One task: call the model, run its calculations, until it answers."""
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.instructions},
            {"role": "user", "content": f"run {number}"},
        ]
        calls = 0
        while True:
            completion = self.client.chat.completions.create(
                model="scripted-model",
                messages=messages,  # type: ignore[arg-type]
                tools=self.tools,  # type: ignore[arg-type]
                tool_choice="auto",
                temperature=0.0,
            )
            calls += 1
            message = completion.choices[0].message
            if not message.tool_calls:
                return calls
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
                value = self.evaluate(arguments["expression"])
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.id,
                        "content": json.dumps({"result": value}),
                    }
                )

    def close(self) -> None:
        self.client.close()


def bare_loop(model: Proc, url: str, tasks: int, steps: int) -> dict[str, Any]:
    agent = BareAgent(url)
    per_step: list[float] = []
    for number in range(3):
        agent.run(number)
    model.take_timings()
    for number in range(tasks):
        started = time.perf_counter()
        calls = agent.run(number)
        elapsed = time.perf_counter() - started
        assert calls == steps, calls
        per_step.append(elapsed * 1000 / calls)
    agent.close()
    server = model.take_timings()
    return {"per_step_ms": per_step, "server_ms": server}


def bare_concurrent(
    env: dict[str, str], tasks: int, latency: float, calls: int
) -> dict[str, Any]:
    """The floor for part 2: ``tasks`` bare loops on as many threads, one process."""
    model, url = start_model(env, "--steps", str(calls), "--latency", str(latency))
    agent = BareAgent(url, connections=max(100, tasks))
    try:
        for number in range(5):
            agent.run(number)
        cpu_before = time.process_time()
        threads = [threading.Thread(target=agent.run, args=(n,)) for n in range(tasks)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu_before
    finally:
        agent.close()
        model.stop()
    return {"wall_s": wall, "ratio": wall / (calls * latency), "cpu_s": cpu}


def overhead(env: dict[str, str], tasks: int, steps: int) -> dict[str, Any]:
    model, url = start_model(env, "--steps", str(steps), "--latency", "0")
    try:
        use_model(url)
        platform = platform_loop(model, tasks, steps)
        bare = bare_loop(model, url, tasks, steps)
    finally:
        model.stop()
    server_platform = median(platform["server_ms"])
    server_bare = median(bare["server_ms"])
    step_platform = median(platform["per_step_ms"])
    step_bare = median(bare["per_step_ms"])
    return {
        "steps_per_task": steps,
        "tasks": tasks,
        "platform_step_ms": step_platform,
        "platform_step_p90_ms": p90(platform["per_step_ms"]),
        "bare_step_ms": step_bare,
        "bare_step_p90_ms": p90(bare["per_step_ms"]),
        "server_ms_platform_run": server_platform,
        "server_ms_bare_run": server_bare,
        "platform_overhead_ms": step_platform - server_platform,
        "bare_overhead_ms": step_bare - server_bare,
        "difference_ms": (step_platform - server_platform) - (step_bare - server_bare),
    }


# -- 2. concurrent tasks -----------------------------------------------------------


def concurrent(
    env: dict[str, str], tasks: int, latency: float, concurrency: int, workers: int
) -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    from registry.models import Agent
    from runs import services as runs
    from runs.models import Task
    from runs.tasks import advance

    model, url = start_model(env, "--script", "redis", "--latency", str(latency))
    threads = -(-concurrency // workers)
    worker_env = {
        **env,
        "OPENAI_BASE_URL": url,
        "REACH_WORKER_CONCURRENCY": str(threads),
    }
    procs = [
        Proc(
            f"worker-{number}",
            [
                sys.executable, "-m", "celery", "-A", "reach_site", "worker",
                "-P", "threads", "-c", str(threads), "-Q", "reach",
                "--without-gossip", "--without-mingle", "--without-heartbeat",
                "-l", "WARNING", "-n", f"bench-{os.getpid()}-{number}@%h",
            ],
            worker_env,
        )
        for number in range(workers)
    ]  # fmt: skip
    try:
        use_model(url)
        alice = get_user_model().objects.get(username="alice")
        agent = Agent.objects.get(name="assistant")

        def make(count: int) -> list[str]:
            ids = []
            with mock.patch.object(runs, "enqueue_advance"):
                for _ in range(count):
                    conversation = runs.conversation_create(owner=alice, agent=agent)
                    task = runs.task_start(conversation=conversation, content=QUESTION)
                    ids.append(str(task.pk))
            return ids

        def run(ids: list[str], timeout: float = 300) -> float:
            started = time.perf_counter()
            for task_id in ids:
                advance.apply_async((task_id,))
            try:
                wait_until(
                    lambda: (
                        Task.objects.filter(
                            pk__in=ids, finished_at__isnull=False
                        ).count()
                        == len(ids)
                    ),
                    timeout=timeout,
                    poll=0.05,
                )
            except TimeoutError:
                counts: dict[str, int] = {}
                for status in Task.objects.filter(pk__in=ids).values_list(
                    "status", flat=True
                ):
                    counts[status] = counts.get(status, 0) + 1
                tail = "\n".join(procs[0].lines[-40:])
                raise TimeoutError(f"tasks by status: {counts}\n{tail}") from None
            return time.perf_counter() - started

        # Waits for the workers to start, and warms them up (imports, connections).
        run(make(20 * workers))
        model.take_timings()
        ids = make(tasks)
        cpu_before = sum(cpu_seconds(p.process.pid) for p in procs)
        wall = run(ids)
        worker_cpu = sum(cpu_seconds(p.process.pid) for p in procs) - cpu_before
        finished = Task.objects.filter(pk__in=ids)
        statuses: dict[str, int] = {}
        for status in finished.values_list("status", flat=True):
            statuses[status] = statuses.get(status, 0) + 1
        sample = list(finished[:5])
        calls = sum(t.steps.filter(kind="model_call").count() for t in sample) / len(
            sample
        )
        server = model.take_timings()
    finally:
        for proc in procs:
            proc.stop()
        model.stop()
    ideal = calls * latency
    return {
        "tasks": tasks,
        "workers": workers,
        "threads_per_worker": threads,
        "latency_s": latency,
        "model_calls_per_task": calls,
        "wall_s": wall,
        "ideal_s": ideal,
        "ratio": wall / ideal,
        "statuses": statuses,
        "server_ms_median": median(server),
        "worker_cpu_s": worker_cpu,
        "worker_cpu_ms_per_task": worker_cpu * 1000 / tasks,
    }


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
        try:
            one = floor = None
            two: list[dict[str, Any]] = []
            if options.only in (None, "overhead"):
                one = overhead(env, options.tasks, options.steps)
            if options.only in (None, "concurrent"):
                for workers in (int(w) for w in options.workers.split(",")):
                    two.append(
                        concurrent(
                            env,
                            options.concurrent,
                            options.latency,
                            options.concurrency,
                            workers,
                        )
                    )
                calls = int(two[0]["model_calls_per_task"])
                floor = bare_concurrent(env, options.concurrent, options.latency, calls)
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
