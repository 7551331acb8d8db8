"""Costs, budgets and routing in the engine, without Django.

Prices (engine.pricing), the cost budget (``max_cost_usd`` → ``cost_budget``),
estimated usage when the endpoint reports none, a tool's ``max_calls_per_run``
and routing by intent (engine.routing): each driven through :class:`Engine`
with the in-process :class:`FakeModel` and a :class:`MemoryJournal`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.context import build_messages
from engine.loop import run_cost
from engine.pricing import ModelPrice, format_usd, price_for
from engine.routing import GENERAL, NONE, Route, RouteBy, Routing, check_toolsets
from engine.spec import (
    ApprovalMode,
    DetailKey,
    ErrorClass,
    Limits,
    StepKind,
    StepStatus,
    StopReason,
    Toolbox,
    Usage,
)
from tests.support.engine_doubles import (
    FakeModel,
    journal,
    make_engine,
    model_calls,
    spec,
    tool_steps,
)
from tests.support.replies import text, tool_call, tool_calls, without_usage

#: $1 per million input tokens, $0.10 cached, $2 per million output tokens.
PRICE = ModelPrice(
    "test-model*", input_per_m=1.0, output_per_m=2.0, cached_input_per_m=0.1
)


class Counter:
    """A handler that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, arguments: dict[str, Any], context: Any) -> dict[str, Any]:
        self.calls += 1
        return {"n": self.calls, "x": arguments.get("x")}


def run(engine: Any, j: Any) -> Any:
    """Advance ``engine`` once over the journal ``j``; return ``j``."""
    engine.advance(j)
    return j


def lookup(**overrides: Any) -> dict[str, Any]:
    counter = Counter()
    return {"lookup": (spec("lookup", **overrides), counter)}


# -- prices ----------


def test_the_most_specific_price_wins_an_exact_name_before_any_pattern():
    prices = [
        ModelPrice("gpt-4o*", 2.5, 10.0),
        ModelPrice("gpt-4o-mini*", 0.15, 0.6),
        ModelPrice("gpt-4o-2024-05-13", 5.0, 15.0),
    ]
    assert price_for("gpt-4o-mini-2024-07-18", prices).pattern == "gpt-4o-mini*"
    assert price_for("GPT-4o-2024-08-06", prices).pattern == "gpt-4o*"
    assert price_for("gpt-4o-2024-05-13", prices).pattern == "gpt-4o-2024-05-13"
    assert price_for("scripted-model", prices) is None


def test_cached_prompt_tokens_cost_the_cached_price():
    usage = Usage.from_dict(
        {
            "prompt_tokens": 1_000_000,
            "completion_tokens": 500_000,
            "total_tokens": 1_500_000,
            "prompt_tokens_details": {"cached_tokens": 400_000},
        }
    )
    assert usage.cached_tokens == 400_000
    # 600k fresh at $1, 400k cached at $0.10, 500k out at $2.
    assert PRICE.cost(usage) == pytest.approx(0.6 + 0.04 + 1.0)
    no_cache_price = ModelPrice("m", input_per_m=1.0, output_per_m=2.0)
    assert no_cache_price.cost(usage) == pytest.approx(1.0 + 1.0)


def test_an_unknown_cost_is_never_shown_as_zero():
    assert format_usd(None) == "cost unknown"
    assert format_usd(0.0) == "$0.00"
    assert format_usd(0.000123) == "$0.000123"
    assert format_usd(1.5) == "$1.50"


def test_every_model_step_records_its_cost_and_an_unpriced_run_records_none():
    model = FakeModel(
        [tool_call("lookup", {"x": "a"}), text("done")], prompt_tokens=1000
    )
    engine = make_engine(model, lookup())
    engine.price = PRICE
    j = run(engine, journal())

    calls = model_calls(j)
    # 1000 prompt at $1/M + 5 completion at $2/M.
    assert [c.cost_usd for c in calls] == [pytest.approx(0.00101)] * 2
    assert tool_steps(j)[0].cost_usd is None
    assert run_cost(j.steps) == pytest.approx(0.00202)

    unpriced = run(make_engine(FakeModel([text("hi")]), {}), journal())
    assert [c.cost_usd for c in model_calls(unpriced)] == [None]


# -- the cost budget ----------


def test_the_cost_budget_stops_the_run_once_its_model_calls_cost_that_much():
    model = FakeModel(
        [tool_call("lookup", {"x": str(n)}) for n in range(10)], prompt_tokens=1000
    )
    tools = lookup()
    engine = make_engine(model, tools, limits=Limits(max_cost_usd=0.0025))
    engine.price = PRICE
    j = run(engine, journal())

    reason, answer, message = j.finished
    assert reason is StopReason.COST_BUDGET
    assert answer is None
    assert "cost budget" in message and "$0.0025" in message
    # 0.00101 per call: the third call crossed it, no fourth was asked.
    assert len(model.requests) == 3
    assert run_cost(j.steps) >= 0.0025


def test_a_cost_budget_does_not_stop_a_run_whose_model_has_no_price():
    model = FakeModel([tool_call("lookup", {"x": "a"}), text("done")])
    engine = make_engine(model, lookup(), limits=Limits(max_cost_usd=0.0))
    j = run(engine, journal())
    assert j.finished[0] is StopReason.FINAL_ANSWER


# -- missing usage ----------


def test_missing_usage_records_estimated_tokens_flagged_as_estimated():
    model = FakeModel([without_usage(text("The answer is 4."))])
    engine = make_engine(model, {})
    engine.price = PRICE
    j = run(engine, journal())

    [call] = model_calls(j)
    assert call.usage["estimated"] is True
    assert call.usage["prompt_tokens"] > 0 and call.usage["completion_tokens"] > 0
    assert call.usage["total_tokens"] == (
        call.usage["prompt_tokens"] + call.usage["completion_tokens"]
    )
    assert call.cost_usd is not None and call.cost_usd > 0
    assert j.usage.total_tokens == call.usage["total_tokens"]


def test_the_token_budget_applies_to_estimated_usage():
    model = FakeModel(
        [without_usage(tool_call("lookup", {"x": str(n)})) for n in range(10)]
    )
    engine = make_engine(model, lookup(), limits=Limits(token_budget=300))
    j = run(engine, journal())

    assert j.finished[0] is StopReason.TOKEN_BUDGET
    assert all(c.usage["estimated"] for c in model_calls(j))
    assert len(model.requests) < 10


# -- a tool's max_calls_per_run ----------


def test_a_call_over_the_tools_max_calls_per_run_is_refused_before_it_runs():
    tools = lookup(max_calls_per_run=2)
    model = FakeModel(
        [
            tool_calls([("lookup", {"x": "a"}), ("lookup", {"x": "b"})]),
            tool_call("lookup", {"x": "c"}),
            text("done"),
        ]
    )
    j = run(make_engine(model, tools), journal())

    handler = tools["lookup"][1]
    assert handler.calls == 2
    statuses = [(s.status, s.error_class) for s in tool_steps(j)]
    assert statuses == [
        (StepStatus.SUCCEEDED, None),
        (StepStatus.SUCCEEDED, None),
        (StepStatus.SKIPPED, ErrorClass.TOOL_CALL_LIMIT),
    ]
    # The model is told, in the call's tool message, and the run goes on.
    observation = json.loads(model.requests[2][-1]["content"])
    assert "at most 2 times per run" in observation["error"]
    assert j.finished[0] is StopReason.FINAL_ANSWER


def test_a_call_over_the_limit_is_refused_before_anyone_is_asked_to_approve_it():
    tools = lookup(max_calls_per_run=1, approval=ApprovalMode.ALWAYS)
    model = FakeModel(
        [tool_calls([("lookup", {"x": "a"}), ("lookup", {"x": "b"})]), text("ok")]
    )
    j = run(make_engine(model, tools), journal())

    first, second = tool_steps(j)
    assert first.status is StepStatus.WAITING_APPROVAL
    assert second.status is StepStatus.SKIPPED
    assert second.error_class == ErrorClass.TOOL_CALL_LIMIT
    assert DetailKey.APPROVAL not in second.detail


# -- routing ----------

TOOLSETS = [
    {"tag": "notes", "description": "Search notes", "keywords": ["note", "笔记"]},
    {"tag": "math", "description": "Arithmetic", "keywords": ["calculate", "计算"]},
]


def routing(ask_model: bool = True) -> Routing:
    return Routing(toolsets=tuple(check_toolsets(TOOLSETS)), ask_model=ask_model)


def routed_tools() -> dict[str, Any]:
    return {
        "search": (spec("search", tags=("notes",)), Counter()),
        "calc": (spec("calc", tags=("math",)), Counter()),
        "clock": (spec("clock"), Counter()),
    }


def test_rules_pick_the_toolsets_whose_keywords_occur_in_the_message():
    r = routing()
    assert r.by_rules("请计算一下预算") == Route("math", ("math",), RouteBy.RULE)
    assert r.by_rules("search my NOTES and calculate") == Route(
        "notes+math", ("notes", "math"), RouteBy.RULE
    )
    assert r.by_rules("hello") is None
    assert r.at_start("hello") is None
    assert routing(ask_model=False).at_start("hello") == Route(
        GENERAL, None, RouteBy.DEFAULT
    )


def test_a_route_offers_its_toolsets_and_every_tool_outside_all_toolsets():
    r = routing()
    box = Toolbox(
        specs={n: s for n, (s, _) in routed_tools().items()},
        handlers={},
    )
    assert r.narrow(box, Route("math", ("math",), RouteBy.RULE)).names() == [
        "calc",
        "clock",
    ]
    assert r.narrow(box, Route(NONE, (), RouteBy.MODEL)).names() == ["clock"]
    assert r.narrow(box, Route(GENERAL, None, RouteBy.MODEL)).names() == [
        "calc",
        "clock",
        "search",
    ]


def test_the_model_picks_when_no_rule_matches_in_one_recorded_call():
    model = FakeModel(
        [text("notes"), tool_call("search", {"x": "redis"}), text("found")]
    )
    engine = make_engine(model, routed_tools())
    engine.routing = routing()
    engine.price = PRICE
    j = run(engine, journal(goal="what did we decide about redis?"))

    route_step, *others = model_calls(j)
    assert route_step.detail[DetailKey.ROUTE] == {
        "intent": "notes",
        "tags": ["notes"],
        "by": "model",
    }
    assert route_step.cost_usd is not None
    # The routing call: no tools, the toolsets described, the message as user.
    assert model.tools_sent[0] == []
    assert "notes: Search notes" in model.requests[0][0]["content"]
    assert model.requests[0][-1] == {
        "role": "user",
        "content": "what did we decide about redis?",
    }
    # Then only the chosen toolset's tools and those outside every toolset.
    offered = {t["function"]["name"] for t in model.tools_sent[1]}
    assert offered == {"search", "clock"}
    # The routing exchange is no turn of the conversation.
    assert all(m["role"] != "assistant" for m in model.requests[1])
    assert j.finished[0] is StopReason.FINAL_ANSWER and len(others) == 2


def test_a_call_of_a_tool_the_route_does_not_offer_is_refused_as_unknown():
    model = FakeModel([text("math"), tool_call("search", {"x": "a"}), text("ok")])
    tools = routed_tools()
    engine = make_engine(model, tools)
    engine.routing = routing()
    j = run(engine, journal(goal="hello"))

    [call] = tool_steps(j)
    assert call.error_class == ErrorClass.UNKNOWN_TOOL
    assert "search" not in (call.error or "").split("Available tools:")[1]
    assert tools["search"][1].calls == 0


def test_an_answer_naming_no_toolset_offers_every_tool_and_none_offers_only_the_rest():
    r = routing()
    assert r.from_reply("I am not sure") == Route(GENERAL, None, RouteBy.MODEL)
    assert r.from_reply("None.") == Route(NONE, (), RouteBy.MODEL)
    assert r.from_reply("Math, notes") == Route(
        "notes+math", ("notes", "math"), RouteBy.MODEL
    )


def test_a_resumed_run_keeps_its_route_without_asking_again():
    first = FakeModel([text("math"), text("done")])
    engine = make_engine(first, routed_tools())
    engine.routing = routing()
    routed = run(engine, journal(goal="hi"))

    # A worker that picks the run up after its routing call asks only the turn.
    resumed = journal(goal="hi", steps=[routed.steps[0].copy()])
    model = FakeModel([text("done")])
    again = make_engine(model, routed_tools())
    again.routing = routing()
    run(again, resumed)

    assert len(model.requests) == 1
    assert {t["function"]["name"] for t in model.tools_sent[0]} == {"calc", "clock"}
    messages = build_messages(
        system="s", history=[], goal="hi", steps=resumed.steps, specs={}
    )
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]


@pytest.mark.parametrize(
    "toolsets",
    [
        "notes",
        [{"tag": "Notes"}],
        [{"tag": "general"}],
        [{"tag": "a"}, {"tag": "a"}],
        [{"tag": "a", "keywords": "x"}],
        [{"tag": "a", "colour": "red"}],
    ],
)
def test_toolsets_that_cannot_route_are_refused_with_a_reason(toolsets):
    with pytest.raises(ValueError) as refused:
        check_toolsets(toolsets)
    assert str(refused.value)


def test_steps_of_a_route_step_are_model_calls():
    model = FakeModel([text("none"), text("hi")])
    engine = make_engine(model, routed_tools())
    engine.routing = routing()
    j = run(engine, journal(goal="hi"))
    assert [s.kind for s in j.steps] == [StepKind.MODEL_CALL, StepKind.MODEL_CALL]
    assert engine.toolbox.names() == ["clock"]
