"""The driver's own threads: stoppable, and keeping their failure to report."""

from __future__ import annotations

import threading
from typing import ClassVar


class DriverThread(threading.Thread):
    """A daemon thread of the chaos driver.

    ``work()`` does the thread's job until done or until ``stopping`` is set; a
    failure is kept in ``error`` for the session to report, and ``done()`` runs
    last either way.

    Each driver is a ``@dataclass(eq=False, repr=False)`` (threads compare by
    identity and keep their own repr): its fields are what the session hands it,
    each named once, and the thread itself is set up after them.
    """

    #: The thread's name, as tracebacks and ``threading.enumerate()`` show it.
    thread_name: ClassVar[str] = "chaos-driver"

    def __post_init__(self) -> None:
        super().__init__(name=self.thread_name, daemon=True)
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            self.error = exc
        finally:
            self.done()

    def work(self) -> None:
        raise NotImplementedError

    def done(self) -> None:
        """Called when the thread ends, whether ``work()`` failed or not."""
