"""Child processes whose output is read line by line, and what the system says of
a process and how to stop one (no Django import).

The launcher's checks, ``make eval``, the benchmarks and the tests all start
processes the same way: leader of a new process group (so a stop reaches the
whole tree), stdout and stderr merged, each line handed to a callback on a
reader thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def spawn(
    argv: Sequence[str],
    *,
    cwd: Path | str,
    env: Mapping[str, str],
    on_line: Callable[[str], None],
) -> subprocess.Popen[str]:
    """Start ``argv``; ``on_line`` gets each output line, without its newline."""
    process = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            on_line(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True, name=f"read-{process.pid}").start()
    return process


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def pid_cmdline(pid: int) -> list[str]:
    """The command line of ``pid`` (empty when it cannot be read)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def signal_group(pid: int, signum: int) -> None:
    """Send ``signum`` to the process group led by ``pid`` (or to ``pid``)."""
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    except PermissionError:
        pass


def stop_foreign(pid: int, timeout: float) -> None:
    """Stop a process that is not our child: SIGTERM its group, then SIGKILL."""
    signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(pid):
        signal_group(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5.0
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
