"""The product's processes under chaos, and the driver that breaks them.

``Processes`` starts beat, N Celery workers and the web server through the test suite's
``Stack`` and can replace each: SIGKILL a worker and start another, restart the
bundled Redis on its port, restart the web server on its port (its websocket clients
reconnect and resume), terminate the app's PostgreSQL connections. The
``FaultDriver`` thread strikes at the moments the schedule (``plan``) chose,
expressed as points of the runs' progress. Django-free.
"""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

import httpx
import psycopg

from bench.chaos.plan import FaultKind
from bench.chaos.threads import DriverThread
from tests.support.redis_server import BundledRedis
from tests.support.stack import Proc, Stack
from tests.support.waiting import wait_for

#: The application_name of the driver's own database connections: never dropped.
DRIVER_APP = "reach-chaos-driver"
#: The application_name of the product's processes' connections.
PRODUCT_APP = "reach-chaos-product"


@dataclass
class Fault:
    """One fault as it happened."""

    at_s: float
    kind: FaultKind
    detail: str


@dataclass
class Processes:
    """Beat, ``workers`` Celery workers of ``threads`` threads, the web server.

    Like ``make up``'s launcher, a watchdog restarts a process that exits on its
    own (and counts it in ``exits``); the faults hold ``lock`` while they kill
    and replace processes, so the watchdog never mistakes one for a crash.
    """

    stack: Stack
    workers: int
    threads: int
    #: A libpq URL of the product's PostgreSQL database; None on SQLite.
    postgres_url: str | None = None
    say: Callable[[str], None] = print
    #: Every process started, dead or alive, for the logs.
    history: list[Proc] = field(default_factory=list)
    #: Processes that exited without being told to.
    exits: list[str] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)
    _started: int = 0
    _stopping: threading.Event = field(default_factory=threading.Event)
    _watchdog: threading.Thread | None = None

    def start(self) -> Processes:
        self.history.append(self.stack.start_beat())
        for _ in range(self.workers):
            self.start_worker()
        self.history.append(self.stack.start_web())
        self._watchdog = threading.Thread(
            target=self._watch, name="chaos-watchdog", daemon=True
        )
        self._watchdog.start()
        return self

    @property
    def web_url(self) -> str:
        return self.stack.web_url

    def live_workers(self) -> list[Proc]:
        return [
            proc
            for name, proc in self.stack.procs.items()
            if name.startswith("worker-")
            and proc.process is not None
            and proc.process.poll() is None
        ]

    def start_worker(self) -> Proc:
        with self.lock:
            self._started += 1
            proc = self.stack.start_worker(f"worker-{self._started}", self.threads)
            self.history.append(proc)
            return proc

    def kill_worker(self, proc: Proc) -> None:
        with self.lock:
            self.stack.procs.pop(proc.name, None)
            proc.kill()  # SIGKILL to its process group: no cleanup, no ack

    def restart_redis(self, down_s: float) -> None:
        with self.lock:
            port = self.stack.redis.port
            self.stack.redis.stop()
            time.sleep(down_s)
            self.stack.redis = BundledRedis(port=port).start()

    def restart_web(self, sig: int, down_s: float) -> None:
        with self.lock:
            old = self.stack.procs.pop("web")
            old.kill(sig)
            time.sleep(down_s)
            self._start_web(old)

    def _start_web(self, old: Proc) -> None:
        web = Proc(old.name, old.argv, old.env).start()
        self.history.append(web)
        wait_for(
            lambda: healthy(self.web_url),
            timeout=90,
            what="the web server answering /healthz after its restart",
            detail=web.tail,
        )
        self.stack.procs["web"] = web

    def drop_db_connections(self) -> int:
        """Terminate every PostgreSQL connection of the product's processes."""
        if self.postgres_url is None:
            return 0
        with psycopg.connect(self.postgres_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = %s "
                "AND pid <> pg_backend_pid()",
                (PRODUCT_APP,),
            ).fetchall()
        return sum(1 for (done,) in rows if done)

    def _watch(self) -> None:
        while not self._stopping.wait(0.5):
            with self.lock:
                if not self._stopping.is_set():
                    self.revive()

    def revive(self) -> None:
        """Restart every process that exited on its own."""
        for name, proc in list(self.stack.procs.items()):
            if proc.process is None or proc.process.poll() is None:
                continue
            code = proc.process.returncode
            self.exits.append(f"{name} exited with {code}")
            self.say(f"{name} exited on its own (code {code}); restarting it")
            self.stack.procs.pop(name)
            if name.startswith("worker-"):
                self.start_worker()
            elif name == "beat":
                self.history.append(self.stack.start_beat())
            elif name == "web":
                self._start_web(proc)

    def ensure(self) -> None:
        """Every process up again (after the faults): as many workers as asked."""
        with self.lock:
            self.revive()
            while len(self.live_workers()) < self.workers:
                self.start_worker()

    def stop(self) -> None:
        self._stopping.set()
        if self._watchdog is not None:
            self._watchdog.join(120)
        with self.lock:
            self.stack.stop()
            for proc in self.history:
                with contextlib.suppress(Exception):
                    proc.kill()


def healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass(eq=False, repr=False)
class FaultDriver(DriverThread):
    """Strikes each scheduled fault once the runs' progress reaches its point.

    ``progress()`` is the share of runs started (0..1). A kill is aimed, half the
    time, at the worker that holds a write in flight (``busy_worker()`` gives
    its pid) — the moment that decides whether a write happens twice.
    """

    thread_name = "chaos-faults"

    processes: Processes
    schedule: list[tuple[float, FaultKind]]
    _: KW_ONLY
    rng: random.Random
    progress: Callable[[], float]
    busy_worker: Callable[[], int | None]
    started: float
    say: Callable[[str], None]
    faults: list[Fault] = field(default_factory=list, init=False)
    begun: int = field(default=0, init=False)

    def work(self) -> None:
        for point, kind in self.schedule:
            while self.progress() < point and not self.stopping.is_set():
                time.sleep(0.05)
            if self.stopping.is_set():
                return
            self.stopping.wait(self.rng.uniform(0.0, 1.5))
            self.begun += 1
            at = time.monotonic() - self.started
            self.say(f"{kind} ...")
            detail = self.strike(kind)
            self.say(f"{kind}: {detail}")
            self.faults.append(Fault(round(at, 1), kind, detail))

    def done(self) -> None:
        self.begun = len(self.schedule)

    def strike(self, kind: FaultKind) -> str:
        if kind is FaultKind.KILL:
            return self.kill()
        if kind is FaultKind.REDIS:
            down = round(self.rng.uniform(0.3, 2.0), 1)
            self.processes.restart_redis(down)
            return f"down {down} s"
        if kind is FaultKind.WEB:
            sig = self.rng.choice((signal.SIGTERM, signal.SIGKILL))
            down = round(self.rng.uniform(0.2, 1.5), 1)
            self.processes.restart_web(sig, down)
            return f"{signal.Signals(sig).name}, down {down} s"
        return f"{self.processes.drop_db_connections()} connections terminated"

    def kill(self) -> str:
        aimed = self.rng.random() < 0.5
        pause = self.rng.uniform(0.2, 2.0)
        with self.processes.lock:
            workers = self.processes.live_workers()
            if not workers:
                return "no live worker to kill"
            victim = None
            deadline = time.monotonic() + 3
            while aimed and victim is None and time.monotonic() < deadline:
                pid = self.busy_worker()
                victim = next(
                    (w for w in workers if w.process and w.process.pid == pid), None
                )
                if victim is None:
                    time.sleep(0.02)
            how = "during a write"
            if victim is None:
                victim = self.rng.choice(workers)
                how = "at a random moment"
            self.processes.kill_worker(victim)
            time.sleep(pause)
            replacement = self.processes.start_worker()
        return f"{victim.name} {how}; {replacement.name} up after {pause:.1f} s"
