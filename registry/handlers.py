"""Python tool handlers registered in code, by name (never an import path).

A table of name -> function, filled by whichever module defines a handler (the
built-in tools of ``effects`` and ``memory``, the operator's
``REACH_EXTRA_TOOL_MODULES``) when it is imported: data that a tool's definition
names, not a port. Where a lower layer needs one provider from a higher app it
reads a slot (infra/slots.py); where many apps listen, a signal (runs/ports.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections, connection

from engine.spec import CallContext, Handler

_HANDLERS: dict[str, Handler] = {}


def register(name: str) -> Callable[[Handler], Handler]:
    """Register a handler under ``name`` for tools of kind ``python``."""

    def decorator(func: Handler) -> Handler:
        @functools.wraps(func)
        def wrapper(arguments: dict[str, Any], context: CallContext) -> Any:
            # Handlers run on pool threads: give each call a fresh connection.
            close_old_connections()
            try:
                return func(arguments, context)
            finally:
                connection.close()

        _HANDLERS[name] = wrapper
        return wrapper

    return decorator


def get_handler(name: str) -> Handler | None:
    return _HANDLERS.get(name)


def handler_names() -> list[str]:
    return sorted(_HANDLERS)
