"""Waiting for a condition: poll it against a deadline, never sleep a guess."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connection


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 30.0,
    *,
    interval: float = 0.05,
    what: str = "the condition",
    detail: Callable[[], str] | None = None,
) -> Any:
    """Poll ``predicate`` until it returns something truthy and return that.

    After ``timeout`` seconds raise ``TimeoutError`` naming ``what`` and, when
    given, what ``detail()`` says then (a log tail, say).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            message = f"{what} not met within {timeout:g} s"
            if detail is not None:
                message += "\n" + detail()
            raise TimeoutError(message)
        time.sleep(interval)


def in_threads(target: Callable[[int], Any], count: int, *, timeout: float) -> None:
    """Run ``target(0)`` … ``target(count - 1)`` each in its own thread, all at
    once, and wait up to ``timeout`` seconds for each to end."""
    threads = [threading.Thread(target=target, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)


def at_once(jobs: list[Callable[[], Any]], timeout: float = 120) -> list[Any]:
    """Run every job in its own thread, released together by a barrier; return
    their results (an exception a job raised is its result). Each thread closes
    its database connection when done."""
    barrier = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)

    def run(index: int, job: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout=30)
            results[index] = job()
        except BaseException as exc:  # noqa: BLE001 - asserted by the caller
            results[index] = exc
        finally:
            connection.close()

    threads = [
        threading.Thread(target=run, args=(i, job), daemon=True)
        for i, job in enumerate(jobs)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
        assert not thread.is_alive(), "a thread hung"
    return results
