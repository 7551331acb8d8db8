"""Suite documents: reading YAML or JSON, and saying exactly what is wrong.

A suite names an agent, how many runs each case gets, and its cases::

    name: notes-demo
    agent: assistant
    runs: 3
    cases:
      - id: redis-budget
        input: "项目笔记里哪个方案提到 Redis？…"   # or a list: one turn each
        expect: {answer_contains: ["1088"], tools: [search_notes, calculate]}
        approvals: reject                          # approve | reject | leave
        results: {send_email: {"status": "sent"}}  # what a tool answers here
        injection: {tool: search_notes, text: "…"} # rides on that tool's result
        reference: "…"                             # the right answer (for judges)
        source: <run id>                           # a case made from a run

A suite with ``clean_baseline: true`` also runs every case that has an
``injection`` without it, so that utility under attack is read beside utility.
The built-in suites are the YAML files beside this module.
"""

from __future__ import annotations

import json
import re
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

BUILTIN_DIR = Path(__file__).resolve().parent / "suites"


class Approver(StrEnum):
    """What a case's simulated approver does with every request of its runs."""

    APPROVE = "approve"
    REJECT = "reject"
    #: Decide nothing: the run is left waiting, then cancelled and scored.
    LEAVE = "leave"


APPROVERS = tuple(Approver)
MAX_RUNS = 50
MAX_CASES = 500

_TOP_KEYS = {"name", "description", "agent", "runs", "cases", "clean_baseline", "judge"}
_CASE_KEYS = {
    "id",
    "input",
    "expect",
    "approvals",
    "results",
    "injection",
    "notes",
    # A case made from a recorded run (evals.from_runs): the right answer's text
    # (what a judge compares with) and the run it came from.
    "reference",
    "source",
    # A judge (feedback.Judge, by name) scores the answer beside the exact checks.
    "judge",
}
_EXPECT_KEYS = {
    "answer_contains",
    "answer_regex",
    "tools",
    "arguments",
    "forbidden_tools",
    "max_steps",
    "stop_reason",
    # A guardrail that must trip (a name, a kind or what it found), or several.
    "guardrail",
    # Fields the structured answer must hold (the agent's answer_schema).
    "answer_json",
}
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class SuiteError(ValueError):
    """A suite document that cannot be run; the message says where and why."""


def parse(text: str) -> dict[str, Any]:
    """Read a YAML or JSON suite (JSON is YAML) and validate it."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SuiteError(f"The suite is not valid YAML or JSON: {exc}") from exc
    return validate(data)


def validate(data: Any) -> dict[str, Any]:
    """``data`` checked and normalised (``runs`` filled in, inputs as lists)."""
    if not isinstance(data, dict):
        raise SuiteError("A suite is an object with name, agent and cases.")
    _unknown(data, _TOP_KEYS, "the suite")
    name = data.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise SuiteError(
            "name: required; letters, digits, '-', '_' or '.', at most 100."
        )
    agent = data.get("agent")
    if agent is not None and not isinstance(agent, str):
        raise SuiteError("agent: the name of an agent.")
    runs = _count(data.get("runs", 1), "runs", MAX_RUNS)
    cases = data.get("cases")
    if not isinstance(cases, list) or not cases:
        raise SuiteError("cases: a non-empty list.")
    if len(cases) > MAX_CASES:
        raise SuiteError(f"cases: at most {MAX_CASES}.")
    seen: set[str] = set()
    normalised = []
    for index, case in enumerate(cases):
        normalised.append(_case(case, index, seen))
    judge = _judge(data.get("judge"), "judge")
    return {
        "name": name,
        "description": str(data.get("description") or ""),
        "agent": agent,
        "runs": runs,
        "clean_baseline": bool(data.get("clean_baseline", False)),
        "cases": normalised,
        **({"judge": judge} if judge else {}),
    }


def _judge(value: Any, where: str) -> str:
    """A judge's name (checked against the judges when a report starts)."""
    if value in (None, ""):
        return ""
    if not isinstance(value, str) or not NAME.match(value):
        raise SuiteError(f"{where}: the name of a judge (Admin → Judges).")
    return value


def _case(case: Any, index: int, seen: set[str]) -> dict[str, Any]:
    where = f"cases[{index}]"
    if not isinstance(case, dict):
        raise SuiteError(f"{where}: a case is an object with id, input and expect.")
    _unknown(case, _CASE_KEYS, where)
    case_id = case.get("id")
    if not isinstance(case_id, str) or not NAME.match(case_id):
        raise SuiteError(f"{where}.id: required; letters, digits, '-', '_' or '.'.")
    if case_id in seen:
        raise SuiteError(f"{where}.id: {case_id!r} is used twice.")
    seen.add(case_id)
    where = f"case {case_id}"
    turns = case.get("input")
    if isinstance(turns, str):
        turns = [turns]
    if (
        not isinstance(turns, list)
        or not turns
        or not all(isinstance(t, str) and t.strip() for t in turns)
    ):
        raise SuiteError(f"{where}.input: a message, or a list of messages (turns).")
    expect = case.get("expect") or {}
    if not isinstance(expect, dict):
        raise SuiteError(f"{where}.expect: an object.")
    _unknown(expect, _EXPECT_KEYS, f"{where}.expect")
    for key in ("answer_contains", "tools", "forbidden_tools"):
        value = expect.get(key)
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(v, str) for v in value)
        ):
            raise SuiteError(f"{where}.expect.{key}: a list of strings.")
    regex = expect.get("answer_regex")
    if regex is not None:
        try:
            re.compile(str(regex))
        except re.error as exc:
            raise SuiteError(f"{where}.expect.answer_regex: {exc}") from exc
    arguments = expect.get("arguments")
    if arguments is not None and (
        not isinstance(arguments, dict)
        or not all(isinstance(v, dict) for v in arguments.values())
    ):
        raise SuiteError(
            f"{where}.expect.arguments: an object of tool name -> arguments object."
        )
    if expect.get("max_steps") is not None:
        _count(expect["max_steps"], f"{where}.expect.max_steps", 10_000)
    guardrail = expect.get("guardrail")
    if guardrail is not None and not (
        isinstance(guardrail, str)
        or (isinstance(guardrail, list) and all(isinstance(g, str) for g in guardrail))
    ):
        raise SuiteError(f"{where}.expect.guardrail: a name, or a list of names.")
    if expect.get("answer_json") is not None and not isinstance(
        expect["answer_json"], dict
    ):
        raise SuiteError(f"{where}.expect.answer_json: an object of fields.")
    approvals = case.get("approvals", Approver.REJECT)
    if approvals not in APPROVERS:
        raise SuiteError(f"{where}.approvals: one of {', '.join(APPROVERS)}.")
    results = case.get("results") or {}
    if not isinstance(results, dict):
        raise SuiteError(f"{where}.results: an object of tool name -> result.")
    injection = case.get("injection")
    if injection is not None and not (
        isinstance(injection, dict)
        and isinstance(injection.get("tool"), str)
        and isinstance(injection.get("text"), str)
        and set(injection) <= {"tool", "text", "style"}
    ):
        raise SuiteError(f"{where}.injection: an object with tool and text.")
    return {
        "id": case_id,
        "input": turns,
        "expect": expect,
        "approvals": approvals,
        "results": results,
        "injection": injection,
        "notes": str(case.get("notes") or ""),
        **{
            key: str(case[key])
            for key in ("reference", "source")
            if case.get(key) not in (None, "")
        },
        **(
            {"judge": _judge(case["judge"], f"{where}.judge")}
            if case.get("judge")
            else {}
        ),
    }


def _count(value: Any, where: str, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise SuiteError(f"{where}: a whole number from 1 to {most}.")
    return value


def _unknown(data: dict[str, Any], known: set[str], where: str) -> None:
    extra = sorted(set(data) - known)
    if extra:
        raise SuiteError(
            f"{where}: unknown key(s) {', '.join(map(str, extra))}; "
            f"known: {', '.join(sorted(known))}."
        )


def builtin_paths() -> dict[str, Path]:
    """The built-in suites by name (their file's stem)."""
    return {path.stem: path for path in sorted(BUILTIN_DIR.glob("*.yaml"))}


def dumps(document: dict[str, Any]) -> str:
    """A suite as JSON text (what an export or the page's download offers)."""
    return json.dumps(document, ensure_ascii=False, indent=2)


def dumps_yaml(data: Any) -> str:
    """A suite or a case as YAML, as a person would write it (the preview of a
    case made from a run)."""
    return str(yaml.safe_dump(data, allow_unicode=True, sort_keys=False, width=88))
