"""The README's list of the files one chat message passes is the list a run
really passes: traced, on every thread, while one message is accepted, its run
driven to its answer and its steps sent to a watching browser's socket.

A file the run passes that the README does not name fails the test, and so does
a name the run no longer passes (outside :data:`NOT_TRACED_HERE`).
"""

from __future__ import annotations

import asyncio
import re
import sys
import threading
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from infra import push, runtime
from tests.support.demo_run import (
    Run,
    advance,
    deliver,
    script,
    succeeded,
    watching,
    worker_push_recorder,
)

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
HEADING = "### The files one chat message passes through, in order"

#: Files the README names that a message passes but this test cannot trace: the
#: ASGI entry (its client calls Django's handler directly).
NOT_TRACED_HERE = {"reach_site/asgi.py"}

#: The modules of features this run does not use (it is no evaluation, no MCP
#: gateway call, its agent declares no answer schema and no handoff): a run that
#: does not use a feature does not enter its module.
UNUSED_FEATURES = {
    "engine/evaluation.py",
    "gateway/model_client.py",
    "engine/structured.py",
    "engine/handoff.py",
}

#: Not the product: where the test's own code and the libraries live.
_OUTSIDE = ("tests/", "bench/", ".venv", "var/")


def listed() -> set[str]:
    """The ``.py`` files of the README's table (its file column)."""
    text = README.read_text()
    section = text.split(HEADING, 1)[1].split("\n#", 1)[0]
    files: set[str] = set()
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) > 3 and cells[1].strip().isdigit():
            files.update(re.findall(r"`([\w/]+\.py)`", cells[2]))
    return files


def traced(work: Any) -> set[str]:
    """The production files whose code ran while ``work()`` ran, on any thread.

    The pools and the push loop are made anew first, so their threads start
    under the profile (a thread takes it only when it starts)."""
    seen: dict[str, None] = {}

    def profile(frame: Any, event: str, arg: Any) -> None:
        # A function's code, not a module's body (a first import's).
        if event == "call" and frame.f_code.co_name != "<module>":
            seen.setdefault(frame.f_code.co_filename)

    def fresh_threads() -> None:
        runtime.executor.cache_clear()
        runtime.model_pool.cache_clear()
        push._pusher._loop = None

    fresh_threads()
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        fresh_threads()  # later tests run on threads without the profile
    files: set[str] = set()
    for name in seen:
        path = Path(name)
        if not path.is_absolute() or ROOT not in path.parents:
            continue
        relative = path.relative_to(ROOT).as_posix()
        if not relative.startswith(_OUTSIDE):
            files.add(relative)
    return files


def test_the_readme_lists_every_file_one_chat_message_passes(demo, model):
    model(script(2))
    run = Run(demo)
    succeeded(advance(run.post(run.conversation())))  # imports, caches
    conversation = run.conversation()
    pushed: list[dict[str, Any]] = []

    def one_message() -> None:
        with mock.patch("infra.push._Pusher.submit", worker_push_recorder(pushed)):
            task = succeeded(advance(run.post(conversation)))
        consumer, _ = watching(task, pushed, html=True)
        asyncio.run(deliver(consumer, pushed))

    passed = traced(one_message)
    entered = sorted(passed & UNUSED_FEATURES)
    assert not entered, f"a run that does not use them entered {entered}"
    names = listed()
    assert not passed - names, f"the README does not name {sorted(passed - names)}"
    gone = names - passed - NOT_TRACED_HERE
    assert not gone, f"the README names files a run no longer passes: {sorted(gone)}"
