"""The one shape of every test server: ``start()`` returns it, ``stop()`` ends it."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Started:
    """A server usable as ``with Server(...) as server:`` (start, then stop)."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
