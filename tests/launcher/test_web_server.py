"""The web process's command line: one definition (``launcher.web_argv``) that
``make up``, the tests' stack and the benchmarks share; ``REACH_WEB_SERVER``
picks the server."""

from __future__ import annotations

import sys

import pytest

from reach_site import launcher
from tests.support.stack import Stack


def test_uvicorn_is_the_default_and_reach_web_server_picks_another() -> None:
    assert launcher.web_server({}) == "uvicorn"
    assert launcher.web_server({"REACH_WEB_SERVER": " Daphne "}) == "daphne"
    assert launcher.web_server({"REACH_WEB_SERVER": "granian"}) == "granian"
    with pytest.raises(launcher.LaunchError, match="not one of uvicorn, daphne"):
        launcher.web_server({"REACH_WEB_SERVER": "gunicorn"})


def test_uvicorn_runs_as_daphne_does_on_uvloop_and_httptools() -> None:
    argv = launcher.web_argv("uvicorn", "0.0.0.0", 8000, "python")
    assert argv[:3] == ["python", "-m", "uvicorn"]
    assert argv[-1] == "reach_site.asgi:application"
    options = " ".join(argv)
    for option in (
        "--host 0.0.0.0",
        "--port 8000",
        "--loop uvloop",
        "--http httptools",
        "--ws websockets-sansio",
        # Django reads X-Forwarded-Proto itself (REACH_BEHIND_TLS_PROXY); the
        # server must not rewrite the scheme or the client address from headers.
        "--no-proxy-headers",
        "--ws-per-message-deflate false",
        "--lifespan off",
        f"--timeout-graceful-shutdown {launcher.WEB_GRACE_S}",
    ):
        assert option in options, option
    assert launcher.WEB_GRACE_S < launcher.STOP_TIMEOUT_S


@pytest.mark.parametrize("server", launcher.WEB_SERVERS)
def test_every_server_serves_the_app_and_is_recognised_as_ours(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = launcher.web_argv(server, "127.0.0.1", 8123)
    assert argv[:3] == [sys.executable, "-m", server]
    assert "8123" in argv
    monkeypatch.setattr(launcher, "pid_alive", lambda pid: True)
    monkeypatch.setattr(launcher, "pid_cmdline", lambda pid: argv)
    assert launcher.is_ours(123, "web")


def test_the_plan_and_the_tests_stack_start_the_same_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    plan = launcher.make_plan(
        port=8123,
        host="127.0.0.1",
        no_model=True,
        concurrency=1,
        var_dir=tmp_path,
        base_dir=tmp_path,
        model_name="m",
        environ={"REACH_WEB_SERVER": "granian"},
    )
    assert plan.web_server == "granian"
    started: list[list[str]] = []

    class Started:
        def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
            started.append(argv)

        def start(self) -> Started:
            return self

    monkeypatch.setattr("tests.support.stack.Proc", Started)
    monkeypatch.setattr("tests.support.stack.wait_for", lambda *a, **k: True)
    stack = Stack(env={"REACH_WEB_SERVER": "granian"}, redis=None)  # type: ignore[arg-type]
    stack.start_web()
    port = int(stack.web_url.rsplit(":", 1)[1])
    assert started == [launcher.web_argv("granian", "127.0.0.1", port)]
