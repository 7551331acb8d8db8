"""Django's cache on the product's Redis: what every web process must share.

The ``shared`` cache of the settings. Its server is ``settings.REDIS_URL`` as it
is when a thread first uses the cache (not at import), so the URL the launcher
wrote under ``var/``, or one set after start-up (the tests' bundled server), is
the one used.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.cache.backends.redis import RedisCache


class SharedRedisCache(RedisCache):
    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server or settings.REDIS_URL, params)

    def ttl(self, key: str) -> int | None:
        """Seconds until ``key`` expires; None when it is absent or never does."""
        full_key = self.make_and_validate_key(key)
        left = int(self._cache.get_client(full_key).ttl(full_key))
        return left if left >= 0 else None
