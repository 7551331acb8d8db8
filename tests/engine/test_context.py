"""The context budget: estimates without downloads, compaction, what stays verbatim."""

from __future__ import annotations

import json
from typing import Any

from engine.canonical import dumps
from engine.context import (
    DATA_NOTICE,
    TokenEstimator,
    build_messages,
    estimate_chars_tokens,
)
from engine.journal import Outcome
from engine.memory_journal import MemoryJournal
from engine.spec import Limits, StepKind, StepRecord, StepStatus, StopReason
from tests.support.engine_doubles import (
    FakeModel,
    content_tokens,
    journal,
    make_engine,
    spec,
    steps_of,
)
from tests.support.replies import text, tool_call, tool_calls

SYSTEM = "You are the budget assistant. Never invent numbers."
GOAL = "Find the budget expression in the project notes and compute the total."


def counting_model(replies: list[Any]) -> FakeModel:
    """Reports prompt tokens the way the scripted server does: content chars / 4."""
    return FakeModel(replies, prompt_tokens=content_tokens)


def run_lookups(
    model: FakeModel, budget: int, **limits: Any
) -> tuple[MemoryJournal, Outcome]:
    """Advance the budget goal once, with the large-result ``lookup`` tool."""
    engine = make_engine(
        model,
        {"lookup": (spec("lookup", max_result_chars=8000), lookup)},
        limits=Limits(context_budget_tokens=budget, **limits),
    )
    j = journal(goal=GOAL, system=SYSTEM)
    return j, engine.advance(j)


def compactions(j: MemoryJournal) -> list[StepRecord]:
    return steps_of(j, StepKind.COMPACTION)


def report(number: int) -> dict[str, Any]:
    """A large result: many lines, one of which matters (it has the number)."""
    filler = [f"paragraph about something else entirely {'.' * 60}" for _ in range(30)]
    filler.insert(7, f"budget line {number}: 128 * 6 + 320")
    return {"report": number, "lines": filler}


def lookup(arguments: dict[str, Any], context: Any) -> Any:
    return report(int(arguments["x"]))


def test_many_large_results_are_compacted_and_every_request_fits_the_budget():
    budget = 2500
    model = counting_model(
        [tool_call("lookup", {"x": str(i)}) for i in range(8)] + [text("1088")]
    )
    j, outcome = run_lookups(model, budget, max_steps=20)

    assert outcome is Outcome.FINISHED

    assert j.finished[:2] == (StopReason.FINAL_ANSWER, "1088")
    assert len(model.requests) == 9
    done = compactions(j)
    assert done, "no compaction was recorded"
    replaced = {
        int(seq): json.loads(s) for c in done for seq, s in c.detail["replaced"].items()
    }
    tool_seqs = {s.seq: s for s in j.steps if s.kind is StepKind.TOOL_CALL}
    for seq, snap in replaced.items():
        original = tool_seqs[seq]
        assert snap["snapshot"] is True
        assert snap["tool"] == "lookup" and snap["arguments"] == original.arguments
        assert snap["size_chars"] == len(dumps(original.result))
        assert any("128 * 6 + 320" in line for line in snap["lines"])
    first = done[0]
    assert first.detail["estimate_before"] > 0.8 * budget
    assert first.detail["estimate_after"] < first.detail["estimate_before"]
    assert first.detail["budget"] == budget
    for request in model.requests:
        # The system prompt and the user's goal stay verbatim.
        assert request[0] == {"role": "system", "content": f"{SYSTEM}\n\n{DATA_NOTICE}"}
        assert [m["content"] for m in request if m["role"] == "user"] == [GOAL]
    for step in (s for s in j.steps if s.kind is StepKind.MODEL_CALL):
        # Under budget by the engine's estimator and by the model's own count.
        assert step.detail["context_estimate"] <= budget
        assert step.usage["prompt_tokens"] <= budget
    # The model sees the snapshot in place of the old result.
    last = model.requests[-1]
    tool_contents = [json.loads(m["content"]) for m in last if m["role"] == "tool"]
    assert any(c.get("snapshot") for c in tool_contents)


def test_without_compaction_the_same_run_would_overflow():
    """The control for the test above: the results really are too large."""
    steps = 8
    per_result = TokenEstimator().raw([{"content": json.dumps(report(1))}])
    assert steps * per_result > 2500


def test_the_latest_turns_results_are_shortened_when_older_ones_are_not_enough():
    budget = 2000
    model = counting_model(
        [tool_calls([("lookup", {"x": str(i)}) for i in range(4)]), text("done")]
    )
    j, _ = run_lookups(model, budget)

    [compaction] = compactions(j)
    turn = {s.seq for s in j.steps if s.kind is StepKind.TOOL_CALL}
    assert set(map(int, compaction.detail["replaced"])) <= turn
    assert compaction.detail["replaced"]
    second = [s for s in j.steps if s.kind is StepKind.MODEL_CALL][1]
    assert second.detail["context_estimate"] <= budget
    assert second.usage["prompt_tokens"] <= budget


def test_a_shortened_repeat_keeps_its_note_to_the_model():
    budget = 1800
    replies = [tool_call("lookup", {"x": "1"}), tool_call("lookup", {"x": "1"})]
    replies += [
        tool_call("lookup", {"x": "2"}),
        tool_call("lookup", {"x": "3"}),
        text("ok"),
    ]
    model = counting_model(replies)
    j, _ = run_lookups(model, budget)
    repeat = [s for s in j.steps if s.status is StepStatus.DEDUPLICATED][0]
    replaced = {int(k) for c in compactions(j) for k in c.detail["replaced"]}
    assert repeat.seq in replaced
    last = model.requests[-1]
    # FakeModel reuses call ids across turns: find the repeat's answer by position.
    answers = [json.loads(m["content"]) for m in last if m["role"] == "tool"]
    sent = answers[1]
    assert sent["result"]["snapshot"] is True
    assert "already called lookup" in sent["note"]


def test_older_conversation_turns_are_dropped_before_anything_of_the_goal():
    history = []
    for i in range(10):
        history.append({"role": "user", "content": f"old question {i} " + "q" * 800})
        history.append({"role": "assistant", "content": f"old answer {i} " + "a" * 800})
    model = counting_model([text("ok")])
    engine = make_engine(model, {}, limits=Limits(context_budget_tokens=1500))
    j = journal(goal=GOAL, system=SYSTEM, history=history)
    engine.advance(j)

    [compaction] = compactions(j)
    assert compaction.detail["dropped_history_turns"] > 0
    [request] = model.requests
    assert request[0]["content"].startswith(SYSTEM)
    assert request[-1] == {"role": "user", "content": GOAL}
    # The newest turns are the ones kept.
    kept = [m["content"] for m in request if m["role"] == "assistant"]
    assert kept and kept[-1].startswith("old answer 9")
    assert not any(c.startswith("old answer 0") for c in kept)


def test_the_estimator_is_calibrated_by_the_usage_the_model_reports():
    def model_step(raw: float, prompt: int) -> StepRecord:
        return StepRecord(
            seq=1,
            kind=StepKind.MODEL_CALL,
            status=StepStatus.SUCCEEDED,
            usage={
                "prompt_tokens": prompt,
                "completion_tokens": 1,
                "total_tokens": prompt + 1,
            },
            detail={"prompt_estimate": raw},
        )

    assert TokenEstimator.calibrated([]).factor == 1.0
    assert TokenEstimator.calibrated([model_step(100, 150)]).factor == 1.5
    assert TokenEstimator.calibrated([model_step(100, 1000)]).factor == 4.0  # clamped
    # Never scaled down: counting too few tokens would overrun the window.
    assert TokenEstimator.calibrated([model_step(100, 10)]).factor == 1.0
    messages = [{"role": "user", "content": "x" * 400}]
    calibrated = TokenEstimator.calibrated([model_step(100, 200)])
    assert calibrated.estimate(messages) == int(TokenEstimator().raw(messages) * 2) + 1


def test_the_estimate_needs_no_tokenizer_and_counts_cjk_about_one_per_character():
    assert estimate_chars_tokens("abcd" * 100) == 100
    assert estimate_chars_tokens("预算表达式") == 5


def note(seq: int, text: str) -> StepRecord:
    return StepRecord(
        seq=seq, kind=StepKind.NOTE, status=StepStatus.SUCCEEDED, detail={"text": text}
    )


def test_what_the_run_was_given_comes_before_the_question_later_notes_in_place():
    remembered = note(1, "<memory>team Platform</memory>")
    asked = StepRecord(
        seq=2,
        kind=StepKind.MODEL_CALL,
        status=StepStatus.SUCCEEDED,
        response={"role": "assistant", "content": "Hello."},
    )
    hint = note(3, "Answer in one line.")

    messages = build_messages(
        system="You help.",
        history=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hey"},
        ],
        goal="Which team am I on?",
        steps=[remembered, asked, hint],
        specs={},
    )

    assert [(m["role"], m["content"]) for m in messages[1:]] == [
        ("user", "hi"),
        ("assistant", "hey"),
        ("system", "<memory>team Platform</memory>"),
        ("user", "Which team am I on?"),
        ("assistant", "Hello."),
        ("system", "Answer in one line."),
    ]
