"""The parts of ``make bench-internal`` (:mod:`bench.run`) that run the product
in this process: its models, services and Celery task, the openai SDK beside it.

Imported once Django is set up (:func:`bench.run.prepare`), since the settings
come from the scratch instance the benchmark starts (its var dir, its Redis).
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import sys
import threading
import time
from typing import Any
from unittest import mock

import httpx2
import openai
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection

from bench.run import QUESTION, Proc, cpu_seconds, median, p90, start_model, wait_until
from engine.safe_eval import evaluate_arithmetic
from engine.spec import ToolSpec
from reach_site.demo import seed_demo
from registry.models import Agent
from registry.services import agent_snapshot
from runs import counters
from runs import services as runs
from runs import tasks as run_tasks
from runs.models import Task
from runs.tasks import advance


def seed() -> None:
    """The scratch database: migrated, with the demo seed."""
    call_command("migrate", verbosity=0)
    seed_demo()


def use_model(url: str) -> None:
    settings.OPENAI_BASE_URL = url


# -- 1. per-step overhead ----------------------------------------------------------


def warm_up() -> None:
    """Three runs of the demo agent: imports, connections, template loading."""
    alice = get_user_model().objects.get(username="alice")
    agent = Agent.objects.get(name="assistant")
    for _ in range(3):
        conversation = runs.conversation_create(owner=alice, agent=agent)
        task = runs.task_start(conversation=conversation, content="warm up")
        run_tasks.task_advance(task_id=task.pk)


def started_runs(tasks: int) -> list[Any]:
    """``tasks`` new runs of alice's with the demo agent, one conversation each,
    not enqueued: this process drives them (``task_advance``)."""
    alice = get_user_model().objects.get(username="alice")
    agent = Agent.objects.get(name="assistant")
    with mock.patch.object(run_tasks, "enqueue_advance"):
        ids = []
        for number in range(tasks):
            conversation = runs.conversation_create(owner=alice, agent=agent)
            task = runs.task_start(conversation=conversation, content=f"run {number}")
            ids.append(task.pk)
    return ids


def platform_loop(model: Proc, tasks: int, steps: int) -> dict[str, Any]:
    per_step: list[float] = []
    warm_up()
    model.take_timings()
    ids = started_runs(tasks)
    for task_id in ids:
        started = time.perf_counter()
        run_tasks.task_advance(task_id=task_id)
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


def counted_runs(tasks: int) -> dict[str, float]:
    """SQL statements and function calls (``cProfile``, this thread) per run,
    over ``tasks`` runs driven one after another (``python -m bench.calls``)."""
    warm_up()
    ids = started_runs(tasks)
    statements: list[str] = []

    def counted(execute: Any, sql: str, *args: Any) -> Any:
        statements.append(sql)
        return execute(sql, *args)

    profile = cProfile.Profile()
    with connection.execute_wrapper(counted):
        profile.enable()
        for task_id in ids:
            run_tasks.task_advance(task_id=task_id)
        profile.disable()
    counters.flush()  # before the benchmark's Redis stops
    calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
    return {
        "sql_statements_per_run": len(statements) / tasks,
        "function_calls_per_run": calls / tasks,
    }


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
            with mock.patch.object(run_tasks, "enqueue_advance"):
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
