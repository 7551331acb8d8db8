"""The API throttle, kept in Redis so that every web process counts one limit.

DRF's own throttles keep their history in Django's cache; with a per-process cache
(LocMemCache) N web processes would allow N times the rate. This one keeps a
sliding window per user in one Redis sorted set, checked and updated by a Lua
script, so the check and the count are one atomic step across processes (a
read-modify-write of a cached list, as DRF does, lets concurrent requests
through). Like the tools' rate limiter (``infra.runtime.RedisRateLimiter``) it
lets requests through while Redis is unreachable: the API must not fail because
its throttle's store blinked.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import redis
from rest_framework.settings import api_settings
from rest_framework.throttling import UserRateThrottle

from infra.runtime import redis_client

log = logging.getLogger(__name__)

KEY_PREFIX = "reach:throttle:"

#: KEYS[1] the window's key; ARGV: window in seconds, limit, a unique member.
#: Returns {1, 0} when the request is counted and allowed, else {0, wait_ms}.
#: Time is Redis's clock, so web hosts with skewed clocks share one window.
_SLIDING_WINDOW = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local window_ms = tonumber(ARGV[1]) * 1000
local limit = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms - window_ms)
if redis.call('ZCARD', KEYS[1]) < limit then
  redis.call('ZADD', KEYS[1], now_ms, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window_ms)
  return {1, 0}
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, tonumber(oldest[2]) + window_ms - now_ms}
"""


class RedisUserRateThrottle(UserRateThrottle):
    """``UserRateThrottle`` (per user, per address for anonymous callers) over
    Redis; the rate is ``DEFAULT_THROTTLE_RATES["user"]``."""

    _wait_s: float | None = None

    def get_rate(self) -> str | None:
        # Read the rate per request: DRF binds THROTTLE_RATES at import, which
        # would ignore a changed setting.
        rate: str | None = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)
        return rate

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        assert self.num_requests is not None and self.duration is not None
        try:
            allowed, wait_ms = redis_client().eval(
                _SLIDING_WINDOW,
                1,
                KEY_PREFIX + key,
                self.duration,
                self.num_requests,
                uuid.uuid4().hex,
            )
        except redis.RedisError:
            log.warning("API throttle unavailable; allowing the request", exc_info=True)
            return True
        if int(allowed):
            return True
        self._wait_s = max(0.001, int(wait_ms) / 1000)
        return False

    def wait(self) -> float | None:
        return self._wait_s
