"""``python -m bench.calls``: what one run costs, counted rather than timed.

On a shared, noisy machine the timed benchmarks move by tens of percent between
two runs of the same code; a change that saves a tenth of the work is lost in
that. This counts instead (the counts repeat within a tenth of a percent): the product's
runs, one after another in this process (``task_advance``, as in part 1 of
``make bench-internal``) against the scripted model at latency 0, and per run
the SQL statements sent and the Python function calls made on the run's
thread (``cProfile``; the push and heartbeat threads are not in it).

Compare two commits by running it in each (a worktree for the older one).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

from bench.run import prepare, start_model


def count(tasks: int, steps: int) -> dict[str, Any]:
    """Statements and calls per run of ``steps`` model calls, over ``tasks`` runs."""
    with tempfile.TemporaryDirectory(prefix="reach-calls-") as tmp:
        redis_server, env = prepare(Path(tmp))
        # Only once the scratch instance's settings are in place (prepare).
        from django.contrib.auth import get_user_model
        from django.db import connection

        from bench import inproc
        from registry.models import Agent
        from runs import counters
        from runs import services as runs

        model, url = start_model(env, "--steps", str(steps), "--latency", "0")
        try:
            inproc.use_model(url)
            alice = get_user_model().objects.get(username="alice")
            agent = Agent.objects.get(name="assistant")

            def started(number: int) -> list[Any]:
                with mock.patch.object(runs, "enqueue_advance"):
                    return [
                        runs.task_start(
                            conversation=runs.conversation_create(
                                owner=alice, agent=agent
                            ),
                            content=f"run {n}",
                        ).pk
                        for n in range(number)
                    ]

            for task_id in started(3):  # warm up: imports, connections, caches
                runs.task_advance(task_id=task_id)
            ids = started(tasks)
            statements: list[str] = []

            def counted(execute: Any, sql: str, *args: Any) -> Any:
                statements.append(sql)
                return execute(sql, *args)

            profile = cProfile.Profile()
            with connection.execute_wrapper(counted):
                profile.enable()
                for task_id in ids:
                    runs.task_advance(task_id=task_id)
                profile.disable()
            counters.flush()  # before its Redis stops
        finally:
            model.stop()
            redis_server.stop()
    calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
    return {
        "tasks": tasks,
        "model_calls_per_run": steps,
        "sql_statements_per_run": len(statements) / tasks,
        "function_calls_per_run": calls / tasks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20, help="runs counted")
    parser.add_argument("--steps", type=int, default=10, help="model calls per run")
    options = parser.parse_args()
    found = count(options.tasks, options.steps)
    print(
        f"per run of {found['model_calls_per_run']} model calls "
        f"({found['tasks']} runs): "
        f"{found['sql_statements_per_run']:.1f} SQL statements, "
        f"{found['function_calls_per_run']:,.0f} function calls on the run's thread"
    )


if __name__ == "__main__":
    main()
