"""The benchmark's model: the scripted server, timing its own work per request.

``python -m bench.model_server --steps N --latency S`` answers every conversation
with N-1 ``calculate`` calls (one per turn, each on new numbers) and then a text
answer, deciding from the request alone (so any number of concurrent runs work).
``--script redis`` answers the demo question instead (3 model calls per task).
It prints ``READY <base url>`` once serving and ``T <ms>`` for every answered
request: the time the server itself spent on it (parse, validate, decide, encode,
write), without the configured latency.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import Any

from tests.support import scripted_model
from tests.support.scripted_model import (
    AnyReply,
    RedisScript,
    ScriptedModel,
    last_user_index,
    text,
    tool_call,
)

# 200 clients connect at once: a listen backlog of 128 would drop SYNs (1 s retry).
scripted_model._Server.request_queue_size = 1024


class Steps:
    """N-1 tool calls, then an answer."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def __call__(self, request: dict[str, Any]) -> AnyReply:
        messages = request.get("messages") or []
        start = last_user_index(messages) or 0
        done = sum(1 for m in messages[start:] if m.get("role") == "tool")
        if done < self.steps - 1:
            return tool_call("calculate", {"expression": f"{done} * 7 + 1"})
        return text(f"Done after {done} calculations.")


class TimedModel(ScriptedModel):
    """Reports the server's own time per request on stdout."""

    _print_lock = threading.Lock()

    def _sleep(self, seconds: float) -> bool:
        # The configured latency is the model "thinking": not server overhead.
        self._slept.value = getattr(self._slept, "value", 0.0) + max(seconds, 0.0)
        return super()._sleep(seconds)

    def _chat(self, http: Any, raw: bytes) -> None:
        self._slept.value = 0.0
        started = time.perf_counter()
        super()._chat(http, raw)
        own = time.perf_counter() - started - self._slept.value
        with self._print_lock:
            sys.stdout.write(f"T {own * 1000:.4f}\n")
            sys.stdout.flush()

    _slept = threading.local()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--script", choices=["steps", "redis"], default="steps")
    options = parser.parse_args()
    handler: Any = Steps(options.steps) if options.script == "steps" else RedisScript()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    server = TimedModel(handler, port=options.port, latency_s=options.latency)
    server.start()
    print(f"READY {server.base_url}", flush=True)
    while not done.wait(0.5):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
