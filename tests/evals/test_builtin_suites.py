"""The suites shipped beside ``evals/suites.py``: each one parses, and ``make
eval``'s default list names only suites that exist."""

from __future__ import annotations

import pytest

from evals.standalone import DEFAULT_SUITES
from evals.suites import builtin_paths, parse


@pytest.mark.parametrize("name", sorted(builtin_paths()))
def test_every_builtin_suite_parses_under_its_own_name(name: str) -> None:
    suite = parse(builtin_paths()[name].read_text())
    assert suite["name"] == name
    assert suite["cases"]


def test_make_eval_runs_only_suites_that_exist() -> None:
    names = {entry.split(":")[0] for entry in DEFAULT_SUITES}
    assert names <= set(builtin_paths())
    assert {"notes-local", "notes-blind"} <= names
    # What it runs first: the first answer after start-up, then warm answers.
    assert {"first-answer", "warm-answer"} <= set(builtin_paths())
