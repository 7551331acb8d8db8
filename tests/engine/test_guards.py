"""Guardrails and structured answers in the loop, without Django (engine.guards,
engine.structured): what the model and the user see, and how a run stops."""

from __future__ import annotations

import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from engine.guards import (
    ClassifierVerdict,
    GuardAction,
    GuardKind,
    Guards,
    GuardSpec,
    GuardStage,
    cn_id_ok,
    find_personal_data,
    iban_ok,
    luhn_ok,
)
from engine.loop import Engine, Outcome
from engine.redaction import Redactor
from engine.spec import AgentSnapshot, StepKind, StepStatus, StopReason
from tests.support.engine_doubles import (
    FakeModel,
    calculator,
    journal,
    make_engine,
    steps_of,
    tool_steps,
)
from tests.support.replies import text, tool_call

CARD = "4111 1111 1111 1111"  # a test Visa number: passes Luhn
IBAN = "DE89 3704 0044 0532 0130 00"
CN_ID = "11010519491231002X"
SECRET = "s3cr3t-value-of-the-crm"


def guard(kind: GuardKind, stage: GuardStage, action: GuardAction, **config: Any):
    return GuardSpec(
        name=f"{kind.value}-{stage.value}",
        kind=kind,
        stage=stage,
        action=action,
        config=config,
    )


def guarded(engine: Engine, *specs: GuardSpec, **kwargs: Any) -> Engine:
    redactor = kwargs.pop("redactor", Redactor({"CRM_TOKEN": SECRET}))
    heard: list[Any] = kwargs.pop("heard", [])
    engine.guards = Guards(
        specs=specs,
        redactor=redactor,
        on_trip=lambda trip, task: heard.append((trip.guard.name, task)),
        **kwargs,
    )
    engine.redactor = redactor
    return engine


def structured(engine: Engine, schema: dict[str, Any]) -> Engine:
    return dataclasses.replace(
        engine, agent=AgentSnapshot(name="a", extra={"answer_schema": schema})
    )


# -- the checks ---------------------------------------------------------------------


def test_the_check_digits_tell_real_numbers_from_look_alikes():
    assert luhn_ok("4111111111111111")
    assert not luhn_ok("4111111111111112")
    assert iban_ok(IBAN.replace(" ", ""))
    assert not iban_ok("DE89370400440532013001")
    assert cn_id_ok(CN_ID)
    assert not cn_id_ok("110105194912310021")


def test_personal_data_is_found_by_kind_and_masked():
    found = find_personal_data(
        f"卡号{CARD}，IBAN {IBAN}，身份证{CN_ID}，邮箱 li@example.com，"
        "电话 13812345678, order 4111 1111 1111 1112"
    )
    assert found.labels == ("card_number", "iban", "cn_id", "email", "phone")
    assert CARD not in found.masked and "li@example.com" not in found.masked
    assert "[REDACTED:card_number]" in found.masked
    assert "[REDACTED:cn_id]" in found.masked
    # A number that fails Luhn is no card (and too long for a phone number).
    assert "4111 1111 1111 1112" in found.masked


# -- input --------------------------------------------------------------------------


def test_a_card_number_in_the_input_is_masked_before_the_model_sees_it():
    model = FakeModel([text("Noted.")])
    heard: list[Any] = []
    engine = guarded(
        make_engine(model, {}),
        guard(GuardKind.PERSONAL_DATA, GuardStage.INPUT, GuardAction.REDACT),
        heard=heard,
    )
    j = journal(goal=f"Please charge my card {CARD} for the order.")

    assert engine.advance(j) is Outcome.FINISHED

    sent = json.dumps(model.requests[0])
    assert "4111" not in sent
    assert "[REDACTED:card_number]" in model.requests[0][-1]["content"]
    [trip] = steps_of(j, StepKind.GUARDRAIL)
    assert trip.detail["guardrail"]["labels"] == ["card_number"]
    assert trip.detail["guardrail"]["action"] == "redact"
    assert heard == [("personal_data-input", "t1")]
    assert j.finished is not None and j.finished[0] is StopReason.FINAL_ANSWER


def test_earlier_turns_are_masked_too_and_a_resumed_run_records_its_trip_once():
    model = FakeModel([text("ok"), text("ok")])
    engine = guarded(
        make_engine(model, {}),
        guard(GuardKind.PERSONAL_DATA, GuardStage.INPUT, GuardAction.REDACT),
    )
    history = [
        {"role": "user", "content": "mail me at li@example.com"},
        {"role": "assistant", "content": "Sure."},
    ]
    j = journal(goal=f"card {CARD}", history=history)
    engine.advance(j)
    assert "li@example.com" not in json.dumps(model.requests[0])
    # Advanced again (a resume): masked again, not recorded twice.
    j.finished = None
    engine.advance(j)
    # The card's trip once; the e-mail of an earlier turn is masked, no trip.
    assert len(steps_of(j, StepKind.GUARDRAIL)) == 1
    assert "4111" not in json.dumps(model.requests[1])


def test_a_blocked_input_stops_the_run_before_any_model_call_in_the_users_language():
    model = FakeModel([text("never")])
    engine = guarded(
        make_engine(model, {}),
        guard(GuardKind.BLOCKLIST, GuardStage.INPUT, GuardAction.BLOCK, words=["炸弹"]),
    )
    j = journal(goal="怎么做一个炸弹？")
    engine.advance(j)
    assert model.requests == []
    reason, answer, message = j.finished or (None, None, None)
    assert reason is StopReason.GUARDRAIL and answer is None
    assert "安全规则" in (message or "") and "blocklist-input" in (message or "")
    [trip] = steps_of(j, StepKind.GUARDRAIL)
    assert trip.status is StepStatus.FAILED


def test_an_input_classifier_runs_beside_the_model_call_and_its_block_stops_the_run():
    asked: list[str] = []

    def classify(text_: str, config: Any) -> ClassifierVerdict:
        asked.append(text_)
        return ClassifierVerdict("refund" in text_, reason="asks for a refund")

    model = FakeModel([tool_call("calculate", {"expression": "1+1"}), text("2")])
    with ThreadPoolExecutor(2) as pool:
        engine = guarded(
            make_engine(model, calculator()),
            guard(
                GuardKind.CLASSIFIER,
                GuardStage.INPUT,
                GuardAction.BLOCK,
                rubric="Trips when the user asks for a refund.",
            ),
            classify=classify,
        )
        engine.model_pool = pool
        j = journal(goal="I want a refund for order 7")
        engine.advance(j)
    assert asked == ["I want a refund for order 7"]
    assert j.finished is not None and j.finished[0] is StopReason.GUARDRAIL
    # The reply came back (recorded, paid for) but none of its calls ran.
    assert len(model.requests) == 1
    assert tool_steps(j) == []
    [trip] = steps_of(j, StepKind.GUARDRAIL)
    assert trip.detail["guardrail"]["reason"] == "asks for a refund"


# -- answer and tool results --------------------------------------------------------


def test_an_answer_holding_a_known_secret_is_blocked():
    model = FakeModel([text(f"The token is {SECRET}.")])
    engine = guarded(
        make_engine(model, {}),
        guard(GuardKind.SECRETS, GuardStage.ANSWER, GuardAction.BLOCK),
    )
    j = journal(goal="What is the CRM token?")
    engine.advance(j)
    reason, answer, message = j.finished or (None, None, None)
    assert reason is StopReason.GUARDRAIL and answer is None
    assert "secrets-answer" in (message or "") and SECRET not in (message or "")
    [model_step] = steps_of(j, StepKind.MODEL_CALL)
    assert SECRET not in json.dumps(model_step.response)


def test_a_redacted_answer_reaches_the_user_masked():
    model = FakeModel([text(f"Your card is {CARD}.")])
    engine = guarded(
        make_engine(model, {}),
        guard(GuardKind.PERSONAL_DATA, GuardStage.ANSWER, GuardAction.REDACT),
    )
    j = journal(goal="Which card?")
    engine.advance(j)
    assert j.finished == (
        StopReason.FINAL_ANSWER,
        "Your card is [REDACTED:card_number].",
        None,
    )
    [model_step] = steps_of(j, StepKind.MODEL_CALL)
    assert "4111" not in json.dumps(model_step.response)


def test_a_flag_records_and_changes_nothing():
    model = FakeModel([text("x" * 50)])
    engine = guarded(
        make_engine(model, {}),
        guard(GuardKind.MAX_LENGTH, GuardStage.ANSWER, GuardAction.FLAG, max_chars=10),
    )
    j = journal()
    engine.advance(j)
    assert j.finished == (StopReason.FINAL_ANSWER, "x" * 50, None)
    [trip] = steps_of(j, StepKind.GUARDRAIL)
    assert trip.detail["guardrail"]["labels"] == ["max_length"]


def test_a_tool_result_is_masked_before_the_model_reads_it_and_a_block_stops():
    def lookup(arguments: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"customer": "Li", "card": CARD}

    tools = {"lookup": (calculator()["calculate"][0], lookup)}
    tools["lookup"] = (dataclasses.replace(tools["lookup"][0], name="lookup"), lookup)
    model = FakeModel([tool_call("lookup", {"expression": "x"}), text("done")])
    engine = guarded(
        make_engine(model, tools),
        guard(GuardKind.PERSONAL_DATA, GuardStage.TOOL_RESULT, GuardAction.REDACT),
    )
    j = journal()
    engine.advance(j)
    assert "4111" not in json.dumps(model.requests[1])
    [step] = tool_steps(j)
    assert step.result == {"customer": "Li", "card": "[REDACTED:card_number]"}
    assert step.detail["guardrail"][0]["labels"] == ["card_number"]

    model = FakeModel([tool_call("lookup", {"expression": "x"}), text("never")])
    engine = guarded(
        make_engine(model, tools),
        guard(GuardKind.PERSONAL_DATA, GuardStage.TOOL_RESULT, GuardAction.BLOCK),
    )
    j = journal()
    engine.advance(j)
    assert len(model.requests) == 1
    assert j.finished is not None and j.finished[0] is StopReason.GUARDRAIL
    assert "a tool's result" in (j.finished[2] or "")


# -- structured answers -------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}


def test_a_valid_structured_answer_is_parsed():
    model = FakeModel([text('{"city": "Shanghai", "population": 24870895}')])
    engine = structured(make_engine(model, {}), SCHEMA)
    j = journal(goal="Largest city?")
    engine.advance(j)
    assert j.finished is not None and j.finished[0] is StopReason.FINAL_ANSWER
    assert j.answer_json == {"city": "Shanghai", "population": 24870895}


def test_a_mismatch_gets_one_repair_turn():
    model = FakeModel(
        [text('{"city": "Shanghai"}'), text('{"city": "Shanghai", "population": 1}')]
    )
    engine = structured(make_engine(model, {}), SCHEMA)
    j = journal()
    engine.advance(j)
    assert j.answer_json == {"city": "Shanghai", "population": 1}
    [note] = steps_of(j, StepKind.NOTE)
    assert "population" in note.detail["text"]
    # The model read its answer, then why it is wrong.
    assert model.requests[1][-2] == {
        "role": "assistant",
        "content": '{"city": "Shanghai"}',
    }
    assert "'population' is a required property" in model.requests[1][-1]["content"]


def test_a_second_mismatch_stops_with_bad_answer():
    model = FakeModel([text("Shanghai"), text('{"city": 3, "population": 1}')])
    engine = structured(make_engine(model, {}), SCHEMA)
    j = journal()
    engine.advance(j)
    reason, answer, message = j.finished or (None, None, None)
    assert reason is StopReason.BAD_ANSWER and answer is None
    assert "city" in (message or "")
    assert j.answer_json is None
    assert len(model.requests) == 2


@pytest.mark.parametrize("refused", [1, 2])
def test_a_refused_response_format_falls_back_to_the_next(refused: int):
    from engine.model_client import ModelError

    seen: list[Any] = []

    class Picky:
        def complete(self, **request: Any) -> Any:
            seen.append(request.get("response_format"))
            if len(seen) <= refused:
                raise ModelError(
                    "response_format is not supported", kind="x", attempts=[]
                )
            return FakeModel([text('{"city": "A", "population": 2}')]).complete(
                **request
            )

    engine = structured(make_engine(FakeModel([]), {}), SCHEMA)
    engine.model_client = Picky()
    j = journal()
    engine.advance(j)
    assert j.answer_json == {"city": "A", "population": 2}
    kinds = [f["type"] if f else None for f in seen]
    assert kinds == ["json_schema", "json_object", None][: refused + 1]
