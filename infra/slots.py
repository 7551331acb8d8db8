"""A slot: the one provider of something a lower layer needs and a higher app supplies.

A lower layer never imports a higher one (docs/design.md "Layout"). Where it must
reach up to a single provider, it declares a :class:`Slot` at module level, typed by
what it calls, with a comment naming the app and the function that fill it; that
app fills it in its ``AppConfig.ready`` (``slot.fill(provider)``), once every model
is loaded. The call site reads ``slot()`` (or ``slot.get()``), so "go to
definition" on it lands on the declaration that names the provider.

Notifications with many listeners (a task finished) are Django signals instead,
declared once and connected in each listener app's ``ready``. A table of named
handlers (``registry/handlers.py``) is data, neither of these.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")


class Slot(Generic[T]):
    """The one provider of ``what``, filled at startup by the app ``filled_by``.

    Without a ``default``, reading an unfilled slot raises ImproperlyConfigured
    naming that app; with one, the default is what an unfilled slot gives (say
    what it means where the slot is declared). A second ``fill`` replaces the
    first.
    """

    __slots__ = ("_default", "_provider", "filled_by", "what")

    def __init__(self, what: str, *, filled_by: str, default: T | None = None) -> None:
        self.what = what
        self.filled_by = filled_by
        self._default = default
        self._provider: T | None = None

    def fill(self, provider: T) -> None:
        """Make ``provider`` the slot's (the filling app's ``ready`` calls this)."""
        self._provider = provider

    def get(self) -> T:
        """The provider; the default when unfilled, else ImproperlyConfigured."""
        provider = self._provider
        if provider is not None:
            return provider
        if self._default is not None:
            return self._default
        raise ImproperlyConfigured(
            f"No {self.what} is plugged in: add '{self.filled_by}' to INSTALLED_APPS."
        )

    __call__ = get

    @property
    def filled(self) -> bool:
        return self._provider is not None

    def __repr__(self) -> str:
        return f"<Slot {self.what!r} filled by {self.filled_by!r}>"
