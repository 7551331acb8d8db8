"""``python -m bench.calls``: what one run costs, counted rather than timed.

On a shared, noisy machine the timed benchmarks move by tens of percent between
two runs of the same code; a change that saves a tenth of the work is lost in
that. This counts instead (the counts repeat within a tenth of a percent): the
product's runs, one after another in this process (``task_advance``, as in part
1 of ``make bench-internal``) against the scripted model at latency 0, and per
run the SQL statements sent and the Python function calls made on the run's
thread (``cProfile``; the push and heartbeat threads are not in it).

Compare two commits by running it in each (a worktree for the older one).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.run import prepare, start_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20, help="runs counted")
    parser.add_argument("--steps", type=int, default=10, help="model calls per run")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reach-calls-") as tmp:
        redis_server, env = prepare(Path(tmp))
        from bench import inproc  # loaded by prepare, once Django was set up

        model, url = start_model(env, "--steps", str(options.steps), "--latency", "0")
        try:
            inproc.use_model(url)
            found = inproc.counted_runs(options.tasks)
        finally:
            model.stop()
            redis_server.stop()
    print(
        f"per run of {options.steps} model calls ({options.tasks} runs): "
        f"{found['sql_statements_per_run']:.1f} SQL statements, "
        f"{found['function_calls_per_run']:,.0f} function calls on the run's thread"
    )


if __name__ == "__main__":
    main()
