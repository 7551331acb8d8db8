"""The real local model server (``python -m localmodel.server``) for the tests."""

from __future__ import annotations

import contextlib
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localmodel import install

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_SECONDS = 600.0


def skip_reason() -> str | None:
    if not install.runtime_installed():
        return "llama-cpp-python is not installed (python -m localmodel.install)"
    if not install.is_installed():
        return (
            f"the local model is not installed in {install.model_path().parent} "
            "(python -m localmodel.install)"
        )
    return None


def wait_for_ready(process: subprocess.Popen[str], deadline: float) -> str | None:
    """The URL from the server's READY line, or None when it exits or the deadline
    passes first."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read_stdout() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read_stdout, daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            return None
        if line is None:
            return None
        if line.startswith("READY "):
            return line.split(maxsplit=1)[1].strip()


@contextlib.contextmanager
def local_model_server() -> Iterator[str]:
    """Run ``python -m localmodel.server`` on a free loopback port; yield its
    ``/v1`` URL once it printed READY, stop it afterwards."""
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as stderr:
        started = time.monotonic()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "localmodel.server",
                "--model",
                str(install.model_path()),
                "--host",
                "127.0.0.1",
                "--port",
                "0",
            ],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            url = wait_for_ready(process, started + READY_TIMEOUT_SECONDS)
            if url is None:
                process.kill()
                process.wait(timeout=30)
                stderr.seek(0)
                pytest.fail(
                    f"local model server not READY within {READY_TIMEOUT_SECONDS:.0f}s"
                    f" (exit {process.returncode}):\n{stderr.read()[-3000:]}"
                )
            print(f"\nlocal model server READY in {time.monotonic() - started:.1f}s")
            yield url
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=30)
