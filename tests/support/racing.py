"""Racing: jobs run in threads released together, each closing its own
database connection (the concurrency tests of approvals and notify)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection


def at_once(jobs: list[Callable[[], Any]], timeout: float = 120) -> list[Any]:
    """Run every job in its own thread, released together; return their results."""
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
        assert not thread.is_alive(), "a decision thread hung"
    return results
