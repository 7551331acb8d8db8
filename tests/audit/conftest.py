"""Fixtures of the audit tests: the trace tests' recorded run of the demo
question (``redis_task``, and the scripted model it runs on)."""

from tests.traces.conftest import redis_script, redis_task

__all__ = ["redis_script", "redis_task"]
