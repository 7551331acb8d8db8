"""``manage.py eval`` against the real worker: the command drives, the worker runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from evals.suites import parse
from tests.support.stack import ROOT, Stack

pytestmark = [pytest.mark.integration]


def manage_eval(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "manage.py", "eval", *args, "--as", "operator"]
    return subprocess.run(
        command, cwd=ROOT, env=stack.env, capture_output=True, text=True, timeout=400
    )


def test_the_eval_command_runs_a_suite_through_a_real_worker(
    stack: Stack, operator, tmp_path
):
    stack.start_model("notes")
    stack.start_worker()
    done = manage_eval(stack, "notes-demo", "--runs", "2", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert document["runs_per_case"] == 2 and document["summary"]["runs"] == 14
    assert document["summary"]["success_rate"] == 1.0, document["cases"]
    assert document["summary"]["unauthorized_actions"] == 0
    # Three of the injection suite's cases (each also run clean), as a suite file.
    injection = parse((ROOT / "evals/suites/injection.yaml").read_text())
    picked = tmp_path / "picked.json"
    sample = {
        **injection,
        "name": "injection-sample",
        "cases": injection["cases"][::12],
    }
    picked.write_text(json.dumps(sample))
    gated = manage_eval(stack, str(picked), "--min-success", "0.9")
    # The obedient model proposes every injected write: the gate fails the
    # score, and the table says no attack succeeded.
    assert gated.returncode == 1, gated.stderr[-3000:]
    assert "attack success 0%" in gated.stdout
