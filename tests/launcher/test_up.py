"""``manage.py up`` as a real subprocess: embedded redis, the web server, worker, beat.

Each test runs the launcher with ``--no-model`` (``OPENAI_BASE_URL`` points at a
dummy loopback URL, so no model is installed or started), a temporary
``REACH_VAR_DIR`` and a temporary, migrated SQLite database, on a free port.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from reach_site.launcher import pid_alive
from tests.support.ports import free_port, port_listening
from tests.support.waiting import wait_for

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
CHILDREN = ("redis", "web", "worker", "beat")
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0


def log_tail(path: Path, lines: int = 60) -> str:
    """The last lines of the launcher's output, for failure messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no launcher output)"
    return "\n".join(text.splitlines()[-lines:])


class Launcher:
    """One ``manage.py up`` subprocess and what it leaves under ``var/``."""

    def __init__(self, env: dict[str, str], var_dir: Path, port: int, name: str):
        self.env = env
        self.var_dir = var_dir
        self.port = port
        self.log = var_dir.parent / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.seen_pids: set[int] = set()

    def start(self) -> Launcher:
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "up", "--no-model"]
                + ["--port", str(self.port), "--concurrency", "2"],
                cwd=REPO_ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def pids(self) -> dict[str, int]:
        """The children listed in ``var/up.pids`` (empty when absent)."""
        try:
            data = json.loads((self.var_dir / "up.pids").read_text())
        except (OSError, ValueError):
            return {}
        children = dict(data.get("children", {}))
        self.seen_pids.update(children.values())
        return children

    def health(self) -> dict[str, Any] | None:
        """``/healthz`` when it answers 200, else None."""
        url = f"http://127.0.0.1:{self.port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return dict(json.loads(response.read()))
        except (OSError, urllib.error.URLError, ValueError):
            return None
        return None

    def wait_until(
        self, predicate: Callable[[], Any], timeout: float, what: str
    ) -> Any:
        """Poll ``predicate``; fail with the launcher's log tail after ``timeout``."""
        return wait_for(
            predicate,
            timeout,
            interval=0.1,
            what=what,
            detail=lambda: log_tail(self.log),
        )

    def wait_up(self) -> dict[str, int]:
        """Wait until /healthz says redis is ok, the banner is printed and every
        child is listed in ``var/up.pids``."""

        def healthy() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                pytest.fail(
                    f"launcher exited with {self.process.returncode}\n"
                    + log_tail(self.log)
                )
            body = self.health()
            return bool(body and body.get("redis") == "ok")

        self.wait_until(healthy, START_TIMEOUT_S, "/healthz with redis ok")
        self.wait_until(
            lambda: "Ctrl-C stops everything" in self.log.read_text(errors="replace"),
            START_TIMEOUT_S,
            "the launcher's banner",
        )
        self.wait_until(
            lambda: set(CHILDREN) <= set(self.pids()),
            START_TIMEOUT_S,
            "every child in var/up.pids",
        )
        return self.pids()

    def interrupt(self) -> int:
        """SIGINT the launcher (as Ctrl-C would) and return its exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"launcher still running {STOP_TIMEOUT_S:.0f} s after SIGINT\n"
                + log_tail(self.log)
            )

    def kill_everything(self) -> None:
        """Teardown: whatever is still alive of this launcher goes, hard."""
        self.pids()
        candidates = set(self.seen_pids)
        if self.process is not None:
            candidates.add(self.process.pid)
        for pid in candidates:
            if pid_alive(pid):
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
        if self.process is not None and self.process.poll() is None:
            self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def launch_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An environment with its own var dir and a migrated SQLite database."""
    base = tmp_path_factory.mktemp("launcher")
    env = dict(os.environ)
    for name in ("REDIS_URL", "PORT", "REACH_TEST_SQLITE"):
        env.pop(name, None)
    env.update(
        {
            "DATABASE_URL": f"sqlite:///{base / 'reach.sqlite3'}",
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
            "DJANGO_SETTINGS_MODULE": "reach_site.settings",
            "PYTHONUNBUFFERED": "1",
        }
    )
    migrate_env = dict(env, REACH_VAR_DIR=str(base / "migrate-var"))
    result = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
        cwd=REPO_ROOT,
        env=migrate_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return {"base": base, "env": env}


@pytest.fixture
def make_launcher(
    launch_env: dict[str, Any], request: pytest.FixtureRequest
) -> Iterator[Callable[..., Launcher]]:
    """Build launchers sharing one fresh var dir; kill leftovers at teardown."""
    var_dir = Path(launch_env["base"]) / f"var-{request.node.name}"
    var_dir.mkdir()
    env = dict(launch_env["env"], REACH_VAR_DIR=str(var_dir))
    made: list[Launcher] = []

    def make(port: int, name: str = "launcher") -> Launcher:
        launcher = Launcher(env, var_dir, port, f"{request.node.name}-{name}")
        made.append(launcher)
        return launcher

    yield make
    for launcher in reversed(made):
        launcher.kill_everything()


def assert_stopped_cleanly(launcher: Launcher, pids: dict[str, int]) -> None:
    """After SIGINT: exit 0, no child left, no URL or pid file, no listener."""
    redis_url = (launcher.var_dir / "redis.url").read_text().strip()
    redis_port = urlsplit(redis_url).port
    assert redis_port is not None
    code = launcher.interrupt()
    assert code == 0, log_tail(launcher.log)
    alive = {name: pid for name, pid in pids.items() if pid_alive(pid)}
    assert not alive, f"children still alive after the launcher exited: {alive}"
    assert not (launcher.var_dir / "redis.url").exists()
    assert not (launcher.var_dir / "model.url").exists()
    assert not (launcher.var_dir / "up.pids").exists()
    assert not (launcher.var_dir / "celerybeat.pid").exists()
    assert not port_listening(launcher.port)
    assert not port_listening(redis_port)
    assert "up     | stopped" in launcher.log.read_text(errors="replace")


def test_up_serves_stops_cleanly_and_starts_again(
    make_launcher: Callable[..., Launcher],
) -> None:
    port = free_port()
    first = make_launcher(port, "first").start()
    pids = first.wait_up()
    redis_url = (first.var_dir / "redis.url").read_text().strip()
    assert redis_url.startswith("redis://127.0.0.1:")
    assert redis_url.endswith("/0")
    assert not (first.var_dir / "model.url").exists()
    assert all(pid_alive(pid) for pid in pids.values())
    assert_stopped_cleanly(first, pids)

    second = make_launcher(port, "second").start()
    pids_again = second.wait_up()
    assert not set(pids_again.values()) & set(pids.values())
    assert (second.var_dir / "redis.url").exists()
    assert_stopped_cleanly(second, pids_again)


def test_crashed_worker_is_restarted(make_launcher: Callable[..., Launcher]) -> None:
    launcher = make_launcher(free_port()).start()
    pids = launcher.wait_up()
    old_worker = pids["worker"]
    os.kill(old_worker, signal.SIGKILL)

    def new_worker() -> int | None:
        pid = launcher.pids().get("worker")
        return pid if pid and pid != old_worker and pid_alive(pid) else None

    replacement = launcher.wait_until(new_worker, 30, "a new worker pid")
    launcher.wait_until(
        lambda: (
            "worker exited unexpectedly with signal SIGKILL"
            in launcher.log.read_text(errors="replace")
        ),
        10,
        "the crash to be logged",
    )
    assert not pid_alive(old_worker)
    # The other children were left alone.
    current = launcher.pids()
    assert current["worker"] == replacement
    for name in ("redis", "web", "beat"):
        assert current[name] == pids[name]
    assert launcher.health() is not None
    assert_stopped_cleanly(launcher, current)


def test_leftovers_of_a_killed_launcher_are_stopped(
    make_launcher: Callable[..., Launcher],
) -> None:
    port = free_port()
    first = make_launcher(port, "killed").start()
    pids = first.wait_up()
    os.kill(first.pid, signal.SIGKILL)
    first.process.wait(timeout=10)  # type: ignore[union-attr]
    assert all(pid_alive(pid) for pid in pids.values())  # orphans keep running

    second = make_launcher(port, "next").start()
    pids_again = second.wait_up()
    orphans = {name: pid for name, pid in pids.items() if pid_alive(pid)}
    assert not orphans, f"the previous launcher's children survived: {orphans}"
    assert "left by a previous run" in second.log.read_text(errors="replace")
    assert_stopped_cleanly(second, pids_again)
