"""Child processes whose output is read line by line (no Django import).

The launcher's checks, ``make eval``, the benchmarks and the tests all start
processes the same way: leader of a new process group (so a stop reaches the
whole tree), stdout and stderr merged, each line handed to a callback on a
reader thread.
"""

from __future__ import annotations

import subprocess
import threading
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
