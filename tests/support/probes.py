"""Python in a fresh interpreter: what a process started with an environment sees.

A probe is a snippet run as ``python -c`` from the repository root; it prints
what it saw as JSON on its last line (anything logged before is passed over).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def printed_json(stdout: str) -> Any:
    """The JSON a probe printed on its last line."""
    return json.loads(stdout.strip().splitlines()[-1])


def probe(code: str, env: Mapping[str, str]) -> Any:
    """Run ``code`` with exactly ``env`` (it must succeed); -> what it printed."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return printed_json(out.stdout)
