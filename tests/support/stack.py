"""Real processes on loopback: a Celery worker, beat, the web server, the scripted
model.

``Stack`` starts them on the test's database and bundled Redis (the ``stack``
fixture builds it); each ``Proc`` keeps its output for failure messages.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from infra.processes import spawn
from reach_site.launcher import web_argv, web_server
from tests.support.ports import free_port
from tests.support.redis_server import BundledRedis
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    process: subprocess.Popen[str] | None = None
    lines: list[str] = field(default_factory=list)

    def start(self) -> Proc:
        self.process = spawn(
            self.argv, cwd=ROOT, env=self.env, on_line=self.lines.append
        )
        return self

    def wait_line(self, text: str, timeout: float = 60) -> str:
        def found() -> str | None:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited:\n{self.tail()}")
            return next((line for line in self.lines if text in line), None)

        return str(
            wait_for(
                found, timeout, what=f"{self.name} printing {text!r}", detail=self.tail
            )
        )

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def output(self) -> str:
        return "\n".join(self.lines)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.lines[-lines:])


@dataclass
class Stack:
    env: dict[str, str]
    redis: BundledRedis
    web_url: str = ""
    model_url: str = ""
    procs: dict[str, Proc] = field(default_factory=dict)

    def start_worker(self, name: str = "worker", concurrency: int = 8) -> Proc:
        proc = Proc(
            name,
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "reach_site",
                "worker",
                "-P",
                "threads",
                "-c",
                str(concurrency),
                "-Q",
                "reach",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-l",
                "INFO",
                "-n",
                f"{name}-{time.monotonic_ns()}@%h",
            ],
            self.env,
        ).start()
        proc.wait_line("ready", timeout=60)
        self.procs[name] = proc
        return proc

    def start_beat(self, name: str = "beat", app: str = "reach_site") -> Proc:
        """A beat process (``app``: ``reach_site``, or the light
        ``reach_site.beat``); several may run, each with its own schedule file."""
        schedule = Path(self.env["REACH_VAR_DIR"]) / f"celerybeat-schedule-{name}"
        proc = Proc(
            name,
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                app,
                "beat",
                "-l",
                "INFO",
                "-s",
                str(schedule),
            ],
            self.env,
        ).start()
        proc.wait_line("beat: Starting", timeout=60)
        self.procs[name] = proc
        return proc

    def start_web(self) -> Proc:
        """The web process as ``make up`` starts it (``launcher.web_argv``: the
        server ``REACH_WEB_SERVER`` names, else the launcher's default)."""
        port = free_port()
        server = web_server(self.env)
        proc = Proc("web", web_argv(server, "127.0.0.1", port), self.env).start()
        self.web_url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(self.web_url + "/healthz"), timeout=60)
        self.procs["web"] = proc
        return proc

    def api(self, headers: dict[str, str], timeout: float = 10) -> httpx.Client:
        """An HTTP client of the started web process (``start_web``) sending
        ``headers`` (e.g. ``clients.bearer_headers(user)``)."""
        return httpx.Client(base_url=self.web_url, headers=headers, timeout=timeout)

    def start_model(self, script: str = "redis", latency: float = 0.0) -> Proc:
        port = free_port()
        proc = Proc(
            "model",
            [
                sys.executable,
                "-m",
                "tests.support.scripted_model",
                "--port",
                str(port),
                "--script",
                script,
                "--latency",
                str(latency),
            ],
            self.env,
        ).start()
        proc.wait_line("READY", timeout=30)
        self.model_url = f"http://127.0.0.1:{port}/v1"
        self.env["OPENAI_BASE_URL"] = self.model_url
        self.procs["model"] = proc
        return proc

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def ask_over_api(http: httpx.Client, content: str) -> str:
    """Start a conversation and post ``content`` as a program would; the task's id."""
    conversation = http.post("/api/conversations/", json={}).json()
    posted = http.post(
        f"/api/conversations/{conversation['id']}/messages/", json={"content": content}
    )
    assert posted.status_code == 202, posted.text
    return str(posted.json()["task"])
