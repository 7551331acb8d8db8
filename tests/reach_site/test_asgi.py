"""HTTP through the product's ASGI application (reach_site/asgi.py): Django's
middleware chain and the view run in one hop to the sync thread, and the page
comes back with everything the middleware adds."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref import sync

from reach_site.asgi import django_asgi_app
from tests.support.sse import AsgiStream

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_chain_is_loaded_synchronous() -> None:
    assert not sync.iscoroutinefunction(django_asgi_app._middleware_chain)


async def test_a_page_takes_a_few_thread_hops_and_keeps_its_middleware(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hops: list[str] = []
    original = sync.SyncToAsync.__call__

    async def counted(self: sync.SyncToAsync[Any, Any], *args: Any, **kw: Any) -> Any:
        hops.append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kw)

    monkeypatch.setattr(sync.SyncToAsync, "__call__", counted)
    stream = AsgiStream("/accounts/login/")
    assert await stream.open() == 200
    await stream.to_the_end()

    # The request-started signal, the chain with the view, the response's close.
    # Django's async-mode chain took about twenty here (two per middleware).
    assert len(hops) <= 4, hops
    assert b'name="csrfmiddlewaretoken"' in stream.body
    assert "content-security-policy" in stream.headers
    assert stream.headers["x-frame-options"] == "DENY"
    assert stream.headers["x-content-type-options"] == "nosniff"
