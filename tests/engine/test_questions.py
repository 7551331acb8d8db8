"""A question gets no write (engine.questions): a run whose message asks a
question and asks for no action is offered only read-only tools when its limits
say so, its model calls name what it went without, and anything asked for as an
action keeps every tool."""

from __future__ import annotations

from typing import Any

import pytest

from engine.journal import Outcome
from engine.questions import asks_only, for_question
from engine.spec import (
    DetailKey,
    ErrorClass,
    Limits,
    Risk,
    StepStatus,
    StopReason,
    Toolbox,
)
from tests.support.engine_doubles import (
    FakeModel,
    journal,
    make_engine,
    model_calls,
    spec,
    tool_steps,
)
from tests.support.replies import text, tool_call


@pytest.mark.parametrize(
    "message",
    [
        "搜索实验的预算是 500 + 240 吗？",
        "哪个笔记提到了文件轮转",
        "缓存改造的预算是多少？",
        "有没有笔记提到 Kafka",
        "What is the budget of the caching plan?",
        "Which note compares inverted indexes with vector search",
        "How long are log records kept?",
        "Is the search experiment's budget over 700?",
        # Asked as a command, but only to look up or work out.
        "Add up the budgets of the two plans.",
        "Compute the caching rework's budget for me.",
        "Add the budget of the Redis plan to the budget of the search experiment.",
        "List the notes that mention Redis.",
        "算一下搜索实验的总预算",
        "把两个方案的预算加起来",
        # An action word in the condition a question is asked under.
        "If we approve both plans that have a budget, how much do we spend?",
        "如果两个方案都审批通过，一共要花多少钱？",
        # An action word as the thing asked about, after an article or possessive.
        "In which note are old files rotated and archived on a schedule?",
        "What is the status of the ticket?",
        "Is there a message from alice in the notes?",
        "What is the budget of an open ticket?",
        # An action word as the verb of what someone else does.
        "How many gigabytes of logs does the logging system store?",
        "When does the nightly job send the digest?",
        "Is the ticket for the slow cache closed?",
    ],
)
def test_questions_that_ask_for_no_action(message):
    assert asks_only(message)


@pytest.mark.parametrize(
    "message",
    [
        # Actions, asked as questions or not.
        "Can you open a ticket about the slow cache?",
        "Could you email alice the budget?",
        "能帮我开一个工单吗？",
        "把预算发邮件给 alice 好吗？",
        "记住我喜欢中文，可以吗？",
        # Not a question.
        "Open a ticket: the cache is slow.",
        "缓存很慢，开个工单",
        "Add alice to the approvers.",
        # A look-up that ends in an action.
        "Compute the budget and email it to alice.",
        "List the notes that mention Redis and open a ticket for each.",
        "算一下预算，然后发邮件给 alice",
        # A condition, then the request itself.
        "If the budget is over 1000, email ops about it.",
        "If you can, open a ticket for the slow cache?",
        "如果预算超过 1000，发邮件给 ops 好吗？",
        # The verb asks to act, whatever its object is.
        "Can you open the ticket?",
        "Could you send the message to alice?",
        "Can you schedule a meeting?",
        # Asked of the one who would act, it is still a request.
        "Can you store this in memory?",
        "Could someone open a ticket for the slow cache?",
        "Would you please send alice the budget?",
        "",
    ],
)
def test_messages_that_ask_for_an_action_or_ask_nothing(message):
    assert not asks_only(message)


def noop(arguments: dict[str, Any], context: Any) -> Any:
    return {"ok": True}


TOOLS = {
    "search_notes": (spec("search_notes"), noop),
    "calculate": (spec("calculate"), noop),
    "create_ticket": (spec("create_ticket", risk=Risk.WRITE), noop),
    "send_email": (spec("send_email", risk=Risk.IRREVERSIBLE), noop),
}


def test_a_question_keeps_its_reads_and_names_the_writes_it_goes_without():
    toolbox = Toolbox(
        specs={n: s for n, (s, _) in TOOLS.items()},
        handlers={n: h for n, (_, h) in TOOLS.items()},
    )
    turn = for_question("What is the budget?", toolbox)
    assert turn is not None
    assert turn.withheld == ("create_ticket", "send_email")
    assert sorted(turn.toolbox.specs) == ["calculate", "search_notes"]
    assert sorted(turn.toolbox.handlers) == ["calculate", "search_notes"]
    assert for_question("Open a ticket about the budget.", toolbox) is None
    reads = Toolbox(specs={"calculate": TOOLS["calculate"][0]}, handlers={})
    assert for_question("What is 2 + 2?", reads) is None  # nothing to withhold


def offered(model: FakeModel) -> list[list[str]]:
    return [sorted(t["function"]["name"] for t in tools) for tools in model.tools_sent]


def test_a_questions_run_is_offered_no_write_and_its_trace_says_so():
    model = FakeModel(
        [tool_call("search_notes", {"x": "budget"}), text("The budget is 740.")]
    )
    j = journal("What is the search experiment's budget?")
    limits = Limits(questions_read_only=True)
    assert make_engine(model, TOOLS, limits=limits).advance(j) is Outcome.FINISHED
    assert j.finished[0] is StopReason.FINAL_ANSWER
    assert offered(model) == [["calculate", "search_notes"]] * 2
    for step in model_calls(j):
        assert step.detail[DetailKey.WITHHELD] == ["create_ticket", "send_email"]


def test_a_write_proposed_for_a_question_is_not_run():
    model = FakeModel(
        [tool_call("create_ticket", {"x": "budget"}), text("I cannot do that.")]
    )
    j = journal("What is the budget?")
    make_engine(model, TOOLS, limits=Limits(questions_read_only=True)).advance(j)
    [step] = tool_steps(j)
    assert step.tool == "create_ticket"
    assert step.status is StepStatus.FAILED
    assert step.error_class == ErrorClass.UNKNOWN_TOOL


@pytest.mark.parametrize(
    ("goal", "limits"),
    [
        # Asked for an action.
        ("Can you open a ticket about the budget?", Limits(questions_read_only=True)),
        # The switch off (the default: a real model's agents, an agent that opts out).
        ("What is the budget?", Limits()),
    ],
)
def test_every_tool_is_offered_otherwise(goal, limits):
    model = FakeModel([text("Done.")])
    j = journal(goal)
    make_engine(model, TOOLS, limits=limits).advance(j)
    assert offered(model) == [sorted(TOOLS)]
    assert DetailKey.WITHHELD not in model_calls(j)[0].detail


def test_limits_recorded_before_the_switch_read_as_off():
    assert Limits.from_json({"max_steps": 3}).questions_read_only is False
    assert Limits.from_json({"questions_read_only": True}).questions_read_only
