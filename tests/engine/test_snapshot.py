"""The agent snapshot a run starts from, and the step detail it records, as data."""

from __future__ import annotations

import json
from dataclasses import asdict, fields

import pytest

from engine.spec import (
    AgentSnapshot,
    ApprovalMode,
    ApprovalRecord,
    DecisionRecord,
    DetailKey,
    ErrorClass,
    HumanDecision,
    Limits,
    Risk,
    StepDetail,
    StopReason,
    ToolSpec,
)

TOOLS = [
    {
        "name": "calculate",
        "description": "Arithmetic.",
        "parameters": {"type": "object", "properties": {}},
        "kind": "python",
        "risk": "read_only",
        "version": 3,
    },
    {
        "name": "send_email",
        "description": "Mail.",
        "parameters": {"type": "object", "properties": {}},
        "risk": "irreversible",
        "approval": "always",
        "leaves_house": True,
    },
]


def stored(**overrides: object) -> dict[str, object]:
    """A snapshot as ``Task.agent_snapshot`` holds it."""
    return {
        "name": "assistant",
        "model": "m",
        "instructions": "Be brief.",
        "limits": Limits(max_steps=5).to_json(),
        "tools": TOOLS,
        **overrides,
    }


def test_a_snapshot_reads_back_what_it_writes_in_the_stored_shape():
    data = stored(history=[{"role": "user", "content": "hi"}])

    snapshot = AgentSnapshot.from_json(data)

    assert snapshot.to_json() == data
    assert json.loads(json.dumps(snapshot.to_json())) == data
    assert snapshot.limits == Limits(max_steps=5)
    assert snapshot.history == ({"role": "user", "content": "hi"},)


def test_an_older_snapshot_with_a_limit_that_no_longer_exists_still_loads():
    limits = {"max_steps": 4, "max_parallel_http": 2, "retired_budget_s": 9.5}

    snapshot = AgentSnapshot.from_json(stored(limits=limits))

    assert snapshot.limits == Limits(max_steps=4)


def test_missing_or_mistyped_limit_keys_take_their_defaults():
    limits = {"max_tool_calls": "many", "time_budget_s": 30, "token_budget": 1e3}

    snapshot = AgentSnapshot.from_json(stored(limits=limits))

    assert snapshot.limits == Limits(time_budget_s=30.0, token_budget=1000)
    assert AgentSnapshot.from_json(stored(limits={})).limits == Limits()


def test_a_snapshot_without_limits_says_so_and_keeps_no_history_of_its_own():
    data = stored()
    del data["limits"]

    snapshot = AgentSnapshot.from_json(data)

    assert snapshot.limits is None and snapshot.history is None
    assert "limits" not in snapshot.to_json()
    assert AgentSnapshot.from_json(None) == AgentSnapshot()


def test_keys_this_version_does_not_know_are_written_back_as_they_were():
    data = stored(toolsets=["mail"])

    assert AgentSnapshot.from_json(data).to_json() == data


def test_a_tool_definition_is_found_by_name_in_one_place():
    snapshot = AgentSnapshot.from_json(stored())

    assert snapshot.tool("calculate") == TOOLS[0]
    assert snapshot.tool("nope") is None
    mail = snapshot.spec("send_email")
    assert mail is not None and mail.risk is Risk.IRREVERSIBLE and mail.leaves_house
    assert snapshot.spec("calculate").version == 3  # type: ignore[union-attr]
    assert list(snapshot.specs()) == ["calculate", "send_email"]


def test_broken_tool_entries_are_left_out():
    snapshot = AgentSnapshot.from_json(stored(tools=[*TOOLS, "x", {"name": 3}]))

    assert [d["name"] for d in snapshot.tools] == ["calculate", "send_email"]


def test_the_system_prompt_falls_back_to_the_default_instructions():
    assert AgentSnapshot.from_json(stored(instructions="")).system_prompt == (
        "You are a helpful assistant."
    )
    assert AgentSnapshot.from_json(stored()).system_prompt == "Be brief."


def test_step_detail_reads_the_control_keys_typed_from_plain_json():
    detail = json.loads(
        json.dumps(
            {
                DetailKey.SIGNATURE: "abc",
                DetailKey.STOP: StopReason.REPEATED_CALL,
                DetailKey.SAME_AS_SEQ: 2,
                DetailKey.UNTRUSTED: True,
                DetailKey.APPROVAL: {"reasons": ["irreversible action"]},
            }
        )
    )

    view = StepDetail(detail)

    assert view.signature == "abc"
    assert view.stop is StopReason.REPEATED_CALL
    assert view.same_as_seq == 2 and view.untrusted and view.waited_for_approval
    assert view.approval == ApprovalRecord(reasons=("irreversible action",))
    assert view.decision is None and view.approved_hash is None
    empty = StepDetail(None)
    assert empty.stop is None and not empty.untrusted and empty.signature is None


def test_error_classes_compare_equal_to_the_strings_stored():
    assert ErrorClass.REPEATED_CALL == "repeated_call"
    assert (
        json.dumps({"error_class": ErrorClass.TIMEOUT}) == '{"error_class": "timeout"}'
    )


# -- a tool definition read into its spec ---------------------------------------------


def test_every_field_of_a_definition_is_read_into_the_spec() -> None:
    spec = ToolSpec(
        name="lookup",
        description="Look one up.",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}},
        kind="http",
        risk=Risk.WRITE,
        approval=ApprovalMode.RULE,
        approval_rule="amount > 10",
        approvals_required=2,
        approval_ttl_s=60,
        untrusted_output=True,
        idempotent=True,
        timeout_s=2.5,
        max_retries=3,
        max_result_chars=100,
        result_fields=("id",),
        cache_ttl_s=30,
        rate_limit_per_min=5,
        max_calls_per_run=4,
        preview_template="look up {q}",
        tags=("demo",),
        version=7,
        leaves_house=True,
    )
    definition = json.loads(json.dumps(asdict(spec)))
    assert ToolSpec.from_definition(definition) == spec
    # Every field differs from its default above, so a field the reader skipped
    # would come back as its default and fail the comparison.
    defaults = ToolSpec(name="lookup", description="", parameters={})
    assert all(
        getattr(spec, name) != getattr(defaults, name)
        for name in definition
        if name != "name"
    )


def test_a_short_definition_takes_the_defaults_and_empty_values_mean_default() -> None:
    spec = ToolSpec.from_definition(
        {"name": "x", "parameters": None, "tags": None, "max_calls_per_run": None}
    )
    assert spec.description == "" and spec.parameters == {"type": "object"}
    assert spec.risk is Risk.READ_ONLY and spec.approval is ApprovalMode.NEVER
    assert spec.tags == () and spec.max_calls_per_run == 0 and spec.timeout_s == 10.0


def test_a_value_its_field_cannot_read_raises() -> None:
    for bad in ({"timeout_s": None}, {"risk": "bogus"}, {"max_retries": "many"}):
        with pytest.raises((TypeError, ValueError)):
            ToolSpec.from_definition({"name": "x", **bad})


def test_the_json_types_of_a_definition_follow_the_spec() -> None:
    types = ToolSpec.json_types()
    assert list(types) == [f.name for f in fields(ToolSpec)]
    assert types["risk"] == (str,) and types["timeout_s"] == (int, float)
    assert types["approval_rule"] == (str, type(None))
    assert types["tags"] == (list,) and types["parameters"] == (dict,)


# -- the records inside a step's detail ------------------------------------------


def test_a_decision_record_reads_what_approvals_wrote_and_keeps_unknown_keys() -> None:
    written = {
        "decision": "mark_done",
        "by": "operator",
        "at": "2026-12-02T10:00:00+00:00",
        "reason": None,
        "edited": False,
        "approval": "9f1c",
        "recovery": True,
        "later_key": [1, 2],
    }
    record = StepDetail({DetailKey.DECISION: written}).decision
    assert record is not None
    assert record.decision is HumanDecision.MARK_DONE and record.recovery
    assert record.by == "operator" and record.approval == "9f1c"
    assert record.to_json() == written
    # A decision this version does not know reads as no decision, not a crash.
    odd = DecisionRecord.from_json({"decision": "maybe", "by": "x"})
    assert odd is not None and odd.decision is None and odd.by == "x"
    assert DecisionRecord.from_json({}) is None
    assert DecisionRecord.from_json(None) is None


def test_an_approval_record_round_trips_and_reads_an_older_one() -> None:
    record = ApprovalRecord(
        reasons=("irreversible action",),
        preview="Send email to ops@example.com",
        args_hash="abc",
        approvals_required=2,
        ttl_s=600,
        risk="irreversible",
        tainted_by=("search_notes#2",),
    )
    stored = json.loads(json.dumps(record.to_json()))
    assert ApprovalRecord.from_json(stored) == record
    older = ApprovalRecord.from_json({"reasons": ["x"]})
    assert older == ApprovalRecord(reasons=("x",))
    assert older.ttl_s is None and older.preview is None


def test_a_rejection_reason_is_the_steps_else_its_decisions() -> None:
    decided = {"decision": "reject", "by": "operator", "reason": "not now"}
    assert StepDetail({DetailKey.DECISION: decided}).rejection_reason == "not now"
    both = {DetailKey.REASON: "on the step", DetailKey.DECISION: decided}
    assert StepDetail(both).rejection_reason == "on the step"
    assert StepDetail(None).rejection_reason is None
    assert DecisionRecord() == DecisionRecord(decision=None)
