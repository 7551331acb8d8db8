"""``make eval``: the built-in suites on the configured model, on a product of
their own.

It starts ``manage.py up`` on a free port with its own var dir (``var/eval``:
kept, so that one ``make eval`` can be compared with the next), waits until it is
up, runs ``manage.py eval`` for each suite and stops it. The model is the one the
environment configures: the built-in local model unless ``OPENAI_BASE_URL`` is
set. ``python -m evals.standalone [SUITE[:RUNS] ...] [-- eval options]``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from infra.processes import spawn

ROOT = Path(__file__).resolve().parents[1]
#: The tuning suite (notes-local), the ones written apart from it (notes-unseen,
#: notes-heldout, notes-fresh, notes-blind, notes-sealed, notes-sealed2,
#: notes-sealed3 to notes-sealed15, each measured once before its failures were
#: read) and the demo
#: questions three times each, the injection suite once.
DEFAULT_SUITES = (
    "notes-local:3",
    "notes-unseen:3",
    "notes-heldout:3",
    "notes-fresh:3",
    "notes-blind:3",
    "notes-sealed:3",
    "notes-sealed2:3",
    "notes-sealed3:3",
    "notes-sealed4:3",
    "notes-sealed5:3",
    "notes-sealed6:3",
    "notes-sealed7:3",
    "notes-sealed8:3",
    "notes-sealed9:3",
    "notes-sealed10:3",
    "notes-sealed11:3",
    "notes-sealed12:3",
    "notes-sealed13:3",
    "notes-sealed14:3",
    "notes-sealed15:3",
    "notes-demo:3",
    "injection:1",
)
UP_TIMEOUT_S = 20 * 60.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _latencies(manage: list[str], env: dict[str, str], suite: str) -> Any:
    """The first case of ``suite`` run at concurrency 1, or None if it failed."""
    command = [*manage, "eval", suite, "--as", "admin", "--json"]
    result = subprocess.run(
        [*command, "--concurrency", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode:
        print(f"!! {suite} failed: {result.stderr[-2000:]}")
        return None
    return json.loads(result.stdout)["cases"][0]


def first_answer(manage: list[str], env: dict[str, str]) -> None:
    """The demo question first thing after start-up, then again, then a question
    of its shape about another note: the two ratios. The same question again
    finds every one of its model calls' prompts in the model's prompt cache; the
    other question reads its tool results fresh, as a first answer does."""
    case = _latencies(manage, env, "first-answer")
    if case is None:
        return
    first, warm = case["latency_s"]["each"][:2]
    print(
        f"==> first answer after start-up {first:.1f} s, the same question warm "
        f"{warm:.1f} s: {first / warm:.2f}x ({case['passed']}/{case['runs']} passed)"
    )
    other = _latencies(manage, env, "warm-answer")
    if other is None:
        return
    again = other["latency_s"]["each"][0]
    print(
        f"==> first answer after start-up {first:.1f} s, another question of its "
        f"shape warm {again:.1f} s: {first / again:.2f}x "
        f"({other['passed']}/{other['runs']} passed)"
    )


def main(argv: list[str]) -> int:
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    suites = argv or list(DEFAULT_SUITES)
    var_dir = Path(os.environ.get("REACH_EVAL_VAR_DIR") or ROOT / "var" / "eval")
    var_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "REACH_VAR_DIR": str(var_dir),
        "PORT": str(_free_port()),
        "PYTHONUNBUFFERED": "1",
    }
    if not env.get("OPENAI_BASE_URL"):
        # As `make up` runs the built-in model (reach_site/launcher.py): questions
        # get no write tools. The eval commands accept the runs, so they need it.
        env.setdefault("REACH_QUESTIONS_READ_ONLY", "1")
    manage = [sys.executable, "manage.py"]
    for step in (["migrate", "--noinput", "-v", "0"], ["seed_demo"]):
        subprocess.run(
            [*manage, *step], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL
        )
    ready = threading.Event()
    log = (var_dir / "up.log").open("w")

    def line(text: str) -> None:
        log.write(text + "\n")
        log.flush()
        if "Agent Reach is up" in text:
            ready.set()

    up = spawn([*manage, "up"], cwd=ROOT, env=env, on_line=line)
    status = 0
    try:
        started = time.monotonic()
        print(f"==> starting the product for the evaluation (log: {log.name})")
        while not ready.wait(1.0):
            if up.poll() is not None or time.monotonic() - started > UP_TIMEOUT_S:
                print(f"!! the product did not start; see {log.name}")
                return 2
        print(f"==> up in {time.monotonic() - started:.1f} s")
        first_answer(manage, env)
        # The built-in model answers one request at a time: more at once only
        # queue behind it until they time out.
        concurrency = [] if env.get("OPENAI_BASE_URL") else ["--concurrency", "1"]
        for spec in suites:
            name, _, runs = spec.partition(":")
            command = [*manage, "eval", name, "--as", "admin", *concurrency, *extra]
            if runs:
                command += ["--runs", runs]
            print(f"==> {' '.join(command[1:])}")
            result = subprocess.run(command, cwd=ROOT, env=env)
            status = status or result.returncode
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGINT)
            try:
                up.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
        log.close()
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
