"""The built-in model's handler on three wrong answers (localmodel.answering):
a search that found nothing in another language is searched again translated, the
tool's hint given as the answer is asked again, and an expression quoted but not
worked out is sent back for a ``calculate`` call."""

from __future__ import annotations

import json
from typing import Any

import pytest

from localmodel import answering, chatformat, figures, unstated
from tests.localmodel.test_leaks import CALCULATE, SEARCH, TICKET, TOOLS, ask

RECALL = {
    "type": "function",
    "function": {
        "name": "recall",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}


def searched(
    question: str, query: str, result: Any, *, tool: str = "search_notes"
) -> list[dict[str, Any]]:
    """A turn: the question, one call of ``tool`` with ``query``, its result."""
    return [
        {"role": "user", "content": question},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "s1",
                    "type": "function",
                    "function": {
                        "name": tool,
                        "arguments": json.dumps({"query": query}, ensure_ascii=False),
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "s1",
            "content": json.dumps(result, ensure_ascii=False),
        },
    ]


MISSED = {
    "error": "No note mentions any word of 'caching hot queries'. Try fewer or "
    "other words (one name or term works best)."
}
ENGLISH_MISS = searched(
    "Which note is about caching hot queries?", "caching hot queries", MISSED
)


# -- which search is tried again -------------------------------------------------


def test_an_english_search_that_found_nothing_is_tried_in_chinese():
    miss = answering.missed_search(ENGLISH_MISS, TOOLS)
    assert miss == answering.Miss(
        "search_notes",
        "query",
        "caching hot queries",
        "zh",
        "Which note is about caching hot queries?",
    )


def test_a_chinese_search_that_found_nothing_is_tried_in_english():
    turn = searched("哪个笔记讲了滚动发布？", "滚动发布", {"error": "No note …"})
    miss = answering.missed_search(turn, TOOLS)
    assert miss is not None and miss.into == "en" and miss.words == "滚动发布"


def test_a_recall_that_found_nothing_is_tried_again_too():
    turn = searched(
        "我喜欢什么语言？",
        "喜欢 语言",
        {"items": [], "note": "Nothing remembered matches '喜欢 语言'."},
        tool="recall",
    )
    miss = answering.missed_search(turn, [*TOOLS, RECALL])
    assert miss is not None and miss.tool == "recall" and miss.into == "en"


@pytest.mark.parametrize(
    ("turn", "tools"),
    [
        # It found something.
        (
            searched("Which note is about Redis?", "Redis", [{"title": "缓存改造"}]),
            TOOLS,
        ),
        # Its words are of both scripts already (a search tried again, say).
        (searched("Which note?", "caching 缓存", MISSED), TOOLS),
        # Not a search.
        (
            [
                {"role": "user", "content": "What is 2 +?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "s1",
                            "type": "function",
                            "function": {
                                "name": "calculate",
                                "arguments": '{"expression": "2 +"}',
                            },
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "s1", "content": '{"error": "bad"}'},
            ],
            TOOLS,
        ),
        # The search tool is not offered any more.
        (ENGLISH_MISS, [CALCULATE, TICKET]),
        # A Chinese question searched by a name: its Chinese words were there
        # to search; a translation would only bring them back.
        (searched("笔记里有没有提到 GPU 的采购预算？", "GPU", MISSED), TOOLS),
        # And the other way round.
        (searched("Which note is about rolling deploys?", "滚动发布", MISSED), TOOLS),
    ],
)
def test_other_turns_are_not_searched_again(turn, tools):
    assert answering.missed_search(turn, tools) is None


def test_a_translation_adds_only_new_words_of_its_script():
    miss = answering.Miss("search_notes", "query", "caching hot queries", "zh")
    assert (
        answering.expanded(miss, "缓存 热点 查询")
        == "caching hot queries 缓存 热点 查询"
    )
    assert answering.expanded(miss, "caching") is None
    english = answering.Miss("search_notes", "query", "滚动发布", "en")
    assert answering.expanded(english, "rolling release") == "滚动发布 rolling release"


def test_the_translation_grammar_allows_only_the_target_script():
    assert "\u4e00" in answering.translation_grammar("zh")
    assert "[A-Za-z]+" in answering.translation_grammar("en")


# -- expressions -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "quoted"),
    [
        ("搜索实验的预算表达式为 500 + 240。", "500 + 240"),
        ("The budget is (128 + 72) * 3.", "(128 + 72) * 3"),
        ("预算是 128*6+320", "128*6+320"),
        # Worked out: its value stands in the answer.
        ("500 + 240 = 740", None),
        ("The total is 1,088 (128 * 6 + 320).", None),
        # A date or a plain number is no expression.
        ("Written on 2026-12-04, it keeps 7 days.", None),
        ("The total is 1088.", None),
    ],
)
def test_an_expression_without_its_value_is_found(answer, quoted):
    assert figures.uncomputed_expression(answer, TOOLS) == quoted


def test_without_a_calculator_an_expression_is_let_be():
    assert figures.uncomputed_expression("预算是 500 + 240", [SEARCH]) is None


# -- the hint as the answer --------------------------------------------------------


def test_an_answer_repeating_the_hint_is_found_and_a_plain_one_is_not():
    echo = "No note mentions any word of 'caching hot queries'. Try fewer words."
    assert answering.echoed_hint(echo, ENGLISH_MISS)
    assert not answering.echoed_hint("No note is about caching.", ENGLISH_MISS)
    found = searched("Which note?", "Redis", [{"title": "缓存改造", "content": "…"}])
    assert not answering.echoed_hint("缓存改造", found)


def test_an_answer_naming_what_was_searched_for_is_no_echo():
    # The hint quotes the search; the right answer, found by a later search,
    # names the same thing (it had been replaced by "I found nothing").
    answer = "The total budget of the caching hot queries plan is 1088."
    assert not answering.echoed_hint(answer, ENGLISH_MISS)
    assert answering.echoed_hint("Try fewer or other words, please.", ENGLISH_MISS)


def test_the_plain_fact_replaces_this_turns_empty_results_in_the_askers_language():
    asked = answering.said_plainly(ENGLISH_MISS)
    assert asked[:2] == ENGLISH_MISS[:2]
    assert "Nothing matched" in asked[2]["content"]
    assert "Try fewer" not in asked[2]["content"]
    chinese = searched("有没有笔记提到 Kafka 部署？", "Kafka 部署", MISSED)
    assert "没有找到" in answering.said_plainly(chinese)[2]["content"]
    assert answering.nothing_found(chinese).startswith("没有找到")


# -- the handler -------------------------------------------------------------------


def call_of(result: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    [call] = result["choices"][0]["message"]["tool_calls"]
    return call["function"]["name"], json.loads(call["function"]["arguments"])


def test_the_handler_searches_again_with_the_models_translation(monkeypatch):
    result, llama = ask(
        monkeypatch, ["缓存 热点 查询"], assistant=True, messages=ENGLISH_MISS
    )
    assert call_of(result) == (
        "search_notes",
        {"query": "caching hot queries 缓存 热点 查询"},
    )
    # One short generation under the translation grammar, counted in the usage.
    assert len(llama.grammars) == 1 and llama.grammars[0] is not None
    assert result["usage"]["completion_tokens"] == 5
    assert result["choices"][0]["finish_reason"] == "tool_calls"


def test_the_server_alone_does_not_search_again(monkeypatch):
    result, llama = ask(
        monkeypatch,
        ["message:\nNo note is about that."],
        assistant=False,
        messages=ENGLISH_MISS,
    )
    assert result["choices"][0]["message"]["content"] == "No note is about that."


def test_an_empty_translation_lets_the_model_answer(monkeypatch):
    both = searched("Which note is about caching?", "caching", MISSED)
    result, llama = ask(
        monkeypatch,
        ["caching", "message:\nNo note is about caching."],
        assistant=True,
        messages=both,
    )
    assert result["choices"][0]["message"]["content"] == "No note is about caching."
    assert len(llama.grammars) == 2


TRIED_BOTH = searched(
    "Do the notes say anything about Kafka deployment?",
    "Kafka deployment 部署",
    {
        "error": "No note mentions any word of 'Kafka deployment 部署'. Try fewer "
        "or other words (one name or term works best)."
    },
)


ECHO = "message:\nNo note mentions any word of 'Kafka deployment 部署'. Try fewer"
NOTHING_ON_KAFKA = "The notes say nothing about deploying Kafka."


def answered(
    monkeypatch: pytest.MonkeyPatch,
    texts: list[str],
    messages: list[dict[str, Any]] = TRIED_BOTH,
) -> tuple[str, Any]:
    """The handler's answer in assistant mode when the model writes ``texts``,
    and the stand-in that recorded the asks."""
    result, llama = ask(monkeypatch, texts, assistant=True, messages=messages)
    return result["choices"][0]["message"]["content"], llama


def test_the_hint_as_the_answer_is_asked_again_with_the_result_said_plainly(
    monkeypatch,
):
    answer, llama = answered(monkeypatch, [ECHO, f"message:\n{NOTHING_ON_KAFKA}"])
    assert answer == NOTHING_ON_KAFKA
    assert len(llama.grammars) == 2


def test_the_hint_twice_gives_the_plain_fact(monkeypatch):
    answer, _ = answered(monkeypatch, [ECHO, ECHO])
    assert answer == "I found nothing about that: no note mentions it."


def test_an_expression_quoted_is_sent_back_for_the_calculator(monkeypatch):
    from tests.localmodel.test_leaks import AFTER_A_SEARCH

    result, llama = ask(
        monkeypatch,
        [
            "message:\n搜索实验的预算表达式为 500 + 240。",
            'functions.calculate:\n{"expression": "500 + 240"}',
        ],
        assistant=True,
        messages=AFTER_A_SEARCH,
    )
    assert call_of(result) == ("calculate", {"expression": "500 + 240"})
    assert not result["choices"][0]["message"].get("content")
    assert len(llama.grammars) == 2


def test_the_translation_is_asked_with_the_question_it_is_for():
    miss = answering.missed_search(ENGLISH_MISS, TOOLS)
    assert miss is not None and miss.question == ENGLISH_MISS[0]["content"]
    [system, user] = answering.translation_prompt(miss)
    assert "Which note is about caching hot queries?" in user["content"]
    assert "caching hot queries" in user["content"] and "Chinese" in user["content"]
    # The words themselves are asked for, not what a note answering the question
    # holds: asked that way, "caching note" came back as 预算 ("budget"), which
    # found every note with a budget.
    assert 'Chinese words for "caching hot queries"' in user["content"]
    assert "answering this" not in user["content"]


# -- calls the handler asks again ------------------------------------------------


def calculate(expression: str, call_id: str = "k1") -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {
            "name": "calculate",
            "arguments": json.dumps({"expression": expression}),
        },
    }


QUESTION_ONLY = [{"role": "user", "content": "缓存改造的预算算出来是多少？"}]


def test_a_calculation_over_numbers_nobody_gave_asks_for_the_search():
    assert answering.invented_calculation(
        [calculate("100 * 2 + 50")], QUESTION_ONLY, TOOLS
    ) == ("search_notes")
    # The user gave the numbers, or there is no search to ask for.
    asked = [{"role": "user", "content": "What is 345 * 12 + 18?"}]
    assert (
        answering.invented_calculation([calculate("345 * 12 + 18")], asked, TOOLS)
        is None
    )
    # A follow-up's "that" is the figure the last answer gave.
    follow_up = [
        {"role": "user", "content": "What is 25 * 4?"},
        {"role": "assistant", "content": "25 * 4 = 100."},
        {"role": "user", "content": "And that plus 17?"},
    ]
    assert (
        answering.invented_calculation([calculate("100 + 17")], follow_up, TOOLS)
        is None
    )
    assert (
        answering.invented_calculation(
            [calculate("100 * 2 + 50")], QUESTION_ONLY, [CALCULATE]
        )
        is None
    )


CACHE_FOUND = searched(
    "缓存改造和搜索实验的预算加起来是多少？",
    "缓存改造",
    [{"title": "缓存改造", "content": "预算表达式为 128 * 6 + 320。"}],
)


def test_a_figure_of_a_note_not_looked_up_yet_asks_for_the_search_too():
    # Only the caching note was found: its figures are known, the search
    # experiment's 740 is not (it is in a note nobody searched for yet).
    assert (
        answering.invented_calculation(
            [calculate("128 * 6 + 320 + 740")], CACHE_FOUND, TOOLS
        )
        == "search_notes"
    )
    assert (
        answering.invented_calculation([calculate("128 * 6 + 320")], CACHE_FOUND, TOOLS)
        is None
    )
    # A lone digit is a count the question implies (an average of two).
    assert (
        answering.invented_calculation(
            [calculate("(128 * 6 + 320) / 2")], CACHE_FOUND, TOOLS
        )
        is None
    )


def test_the_calculators_own_example_is_no_figure_of_the_question():
    # The demo's calculate describes its parameter "e.g. 128 * 6 + 320 or (2 + 3)
    # * 4": a sum over two notes added the example's 20 for the second note.
    example = {
        **CALCULATE,
        "function": {
            **CALCULATE["function"],
            "description": "Evaluate an arithmetic expression, e.g. (2 + 3) * 4",
        },
    }
    tools = [example, *(t for t in TOOLS if t is not CALCULATE)]
    assert (
        answering.invented_calculation([calculate("(2 + 3) * 4")], CACHE_FOUND, tools)
        == "search_notes"
    )
    # The user's own 2 + 3 is theirs, example or not.
    asked = [{"role": "user", "content": "What is 2 + 3?"}]
    assert answering.invented_calculation([calculate("2 + 3")], asked, tools) is None
    # Digits of its own are let be, as before.
    assert (
        answering.invented_calculation([calculate("(2 + 3) * 5")], CACHE_FOUND, tools)
        is None
    )


def test_searches_that_all_found_nothing_are_told_apart():
    assert answering.searches_all_missed(ENGLISH_MISS)
    assert answering.searches_all_missed(TRIED_BOTH)
    assert not answering.searches_all_missed(CACHE_FOUND)
    # A calculation's result is no search; a turn still to be answered has none.
    from tests.localmodel.test_leaks import AFTER_A_SUM

    assert not answering.searches_all_missed(AFTER_A_SUM)
    assert not answering.searches_all_missed(ENGLISH_MISS[:1])
    # One search found nothing, the next found the note: not a miss.
    found_later = [
        *ENGLISH_MISS,
        *searched("", "缓存", [{"title": "缓存改造", "content": "…"}])[1:],
    ]
    found_later[3]["tool_calls"][0]["id"] = found_later[4]["tool_call_id"] = "s2"
    assert not answering.searches_all_missed(found_later)


def test_the_answer_after_searches_that_found_nothing_reads_that_plainly(monkeypatch):
    answer, llama = answered(monkeypatch, [f"message:\n{NOTHING_ON_KAFKA}"])
    assert answer == NOTHING_ON_KAFKA
    prompt = b"".join(llama.read).decode()
    assert "Nothing matched: no note or record holds these words" in prompt
    assert "Try fewer" not in prompt
    assert len(llama.grammars) == 1


def test_a_call_this_turn_already_made_is_a_repeat():
    made = searched("Which note?", "caching hot queries", MISSED)
    again = made[1]["tool_calls"][0]
    assert answering.repeats_a_call([again], made)
    other = {**again, "function": {**again["function"], "arguments": '{"query": "x"}'}}
    assert not answering.repeats_a_call([other], made)
    # A call of an earlier turn is no repeat.
    later = [
        *made,
        {"role": "assistant", "content": "No."},
        {"role": "user", "content": "Again?"},
    ]
    assert not answering.repeats_a_call([again], later)


def test_the_handler_asks_for_the_search_instead_of_a_made_up_calculation(monkeypatch):
    result, llama = ask(
        monkeypatch,
        [
            'functions.calculate:\n{"expression": "100 * 2 + 50"}',
            'functions.search_notes:\n{"query": "缓存改造"}',
        ],
        assistant=True,
        messages=QUESTION_ONLY,
    )
    assert call_of(result) == ("search_notes", {"query": "缓存改造"})
    assert len(llama.grammars) == 2


def test_the_handler_asks_for_the_answer_instead_of_a_call_made_again(monkeypatch):
    from tests.localmodel.test_leaks import AFTER_A_SUM

    result, llama = ask(
        monkeypatch,
        [
            'functions.calculate:\n{"expression": "500 + 240"}',
            "message:\n搜索实验的预算总和是 740。",
        ],
        assistant=True,
        messages=AFTER_A_SUM,
    )
    message = result["choices"][0]["message"]
    assert message["content"] == "搜索实验的预算总和是 740。"
    assert not message.get("tool_calls")
    assert len(llama.grammars) == 2


# -- an answer wrapped as data ---------------------------------------------------


@pytest.mark.parametrize(
    ("written", "answer"),
    [
        ('{"content": "No note mentions hiring."}', "No note mentions hiring."),
        # Cut off before the object closed (as the model wrote it).
        (
            '{"content": "Sorry, I can\'t find any hiring plans.',
            ("Sorry, I can't find any hiring plans."),
        ),
        (
            '"Sorry, I couldn\'t find any notes about Redis."',
            ("Sorry, I couldn't find any notes about Redis."),
        ),
        ('{"answer": "缓存改造的预算是 1088。"}', "缓存改造的预算是 1088。"),
        # Plain answers, and quotation inside one, are left as they are.
        ("The budget is 1088.", "The budget is 1088."),
        ('The note says "七天".', 'The note says "七天".'),
        ('{"plans": [1, 2]}', '{"plans": [1, 2]}'),
        ('{"content": "x", "plans": [1]}', '{"content": "x", "plans": [1]}'),
    ],
)
def test_an_answer_wrapped_as_data_is_unwrapped(written, answer):
    assert answering.unwrapped(written) == answer


def test_the_handler_shows_the_answer_inside_the_wrapping(monkeypatch):
    wrapped = json.dumps({"content": NOTHING_ON_KAFKA})
    answer, _ = answered(monkeypatch, [f"message:\n{wrapped}"])
    assert answer == NOTHING_ON_KAFKA


# -- notes found that do not hold the name asked about ---------------------------

BUDGET_NOTES = [
    {
        "title": "搜索实验",
        "content": "比较倒排索引与向量检索，预算表达式为 500 + 240。",
    },
    {
        "title": "缓存改造",
        "content": "使用 Redis 缓存热点查询，预算表达式为 128 * 6 + 320。",
    },
]


def off_name(question: str, query: str, found: Any = BUDGET_NOTES) -> list[str]:
    turn = searched(question, query, found)
    return answering.names_not_found(
        turn[2], turn[1]["tool_calls"][0]["function"], question
    )


def test_notes_found_by_other_words_are_not_about_a_name_none_of_them_holds():
    # The translation's 预算 found both notes with a budget; neither mentions CDN.
    asked = "Do the notes mention a budget for a new CDN?"
    assert off_name(asked, "budget CDN 预算内容") == ["CDN"]
    # A capitalised word inside a sentence is a name too; one with a capital
    # inside (MySQL) as well.
    assert off_name(
        "Do any notes plan an Elasticsearch cluster?", "Elasticsearch 集群"
    ) == ["Elasticsearch"]
    assert off_name("笔记里有 MySQL 升级的计划吗？", "MySQL 升级 预算") == ["MySQL"]


def test_a_name_a_found_note_holds_or_no_name_at_all_keeps_the_result():
    assert off_name("What will the Redis caching work cost?", "Redis 预算") == []
    assert off_name("Is there a note on Redis or CDN?", "Redis CDN") == []
    # No name: a sentence's first word, lower-case words, a lone capital.
    assert off_name("Caching plans: which note?", "Caching 缓存") == []
    assert off_name("Which note should I read on caching?", "caching 缓存") == []
    # A search that found nothing is the other rule's (searches_all_missed).
    assert off_name("Is there a CDN?", "CDN", MISSED) == []


def test_the_answer_after_notes_that_miss_the_name_reads_that_plainly():
    asked = "Do the notes mention a budget for a new CDN?"
    turn = [
        *searched(asked, "budget CDN", MISSED),
        *searched(asked, "budget CDN 预算内容", BUDGET_NOTES)[1:],
    ]
    turn[3]["tool_calls"][0]["id"] = turn[4]["tool_call_id"] = "s2"
    assert answering.searches_all_missed(turn)
    said = answering.said_plainly(turn)
    assert "none of the notes found mentions CDN" in said[4]["content"]
    assert "500 + 240" not in said[4]["content"]
    assert "Nothing matched" in said[2]["content"]
    # The same notes found for a name they hold are the answer's to read.
    redis = searched(
        "What will the Redis caching work cost?", "Redis 预算", BUDGET_NOTES
    )
    assert not answering.searches_all_missed(redis)
    assert answering.said_plainly(redis)[2]["content"] == redis[2]["content"]
    # In Chinese for a Chinese question.
    mysql = searched("笔记里有 MySQL 升级的计划吗？", "MySQL 升级 预算", BUDGET_NOTES)
    assert "找到的笔记都没有提到 MySQL" in answering.said_plainly(mysql)[2]["content"]


def prompted(
    monkeypatch: pytest.MonkeyPatch, texts: list[str], messages: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[bytes]]:
    """The handler's answer in assistant mode when the model writes ``texts``,
    and the prompt text each of its generations read, in order."""
    result, llama = ask(monkeypatch, texts, assistant=True, messages=messages)
    return result, llama.prompts


def test_every_ask_after_notes_that_miss_the_name_reads_that_plainly(monkeypatch):
    """The model, asked with the results said plainly, makes the search again;
    asked for the answer, it still reads them said plainly (it had read the two
    budget notes again and answered with one of their budgets)."""
    asked = "Do the notes mention a budget for a new CDN?"
    turn = [
        *searched(asked, "budget CDN", MISSED),
        *searched(asked, "budget CDN 预算内容", BUDGET_NOTES)[1:],
    ]
    turn[3]["tool_calls"][0]["id"] = turn[4]["tool_call_id"] = "s2"
    again = 'functions.search_notes:\n{"query": "budget CDN 预算内容"}'
    result, prompts = prompted(
        monkeypatch, [again, "message:\nThe notes do not mention a CDN."], turn
    )
    assert result["choices"][0]["message"]["content"].startswith(
        "The notes do not mention a CDN."
    )
    assert len(prompts) == 2
    for prompt in prompts:
        text = prompt.decode()
        assert "none of the notes found mentions CDN" in text
        assert "500 + 240" not in text


# -- a combination over several notes is one calculation -------------------------

COMBINED = (
    "Give me the combined budget of the Redis caching work and the inverted-index "
    "experiment."
)


def two_searches(question: str) -> list[dict[str, Any]]:
    """A turn whose two searches found one budget note each."""
    turn = [
        *searched(question, "Redis caching work", BUDGET_NOTES[1:]),
        *searched(question, "倒排索引实验", BUDGET_NOTES[:1])[1:],
    ]
    turn[3]["tool_calls"][0]["id"] = turn[4]["tool_call_id"] = "s2"
    return turn


def test_one_notes_figures_for_a_combination_is_asked_again():
    turn = two_searches(COMBINED)
    note = figures.uncombined_calculation([calculate("500 + 240")], turn)
    assert note is not None
    assert "搜索实验: 500 + 240" in note and "缓存改造: 128 * 6 + 320" in note
    # All the figures, or the values they came to, are a combination.
    for whole in ("128 * 6 + 320 + 500 + 240", "1088 + 740", "1088 - 740"):
        assert figures.uncombined_calculation([calculate(whole)], turn) is None
    # In Chinese too.
    zh = two_searches("缓存改造和搜索实验的预算加起来是多少？")
    assert figures.uncombined_calculation([calculate("128 * 6 + 320")], zh)


def test_a_single_notes_question_or_a_single_note_found_is_let_be():
    single = two_searches("What is the search experiment's budget?")
    assert figures.uncombined_calculation([calculate("500 + 240")], single) is None
    # A difference is the model's to work out step by step: asked for one
    # calculation over every note, it added them.
    exceed = two_searches(
        "By how much does the caching plan's budget exceed the search experiment's?"
    )
    assert figures.uncombined_calculation([calculate("500 + 240")], exceed) is None
    one = searched(COMBINED, "Redis", BUDGET_NOTES[1:])
    assert figures.uncombined_calculation([calculate("128 * 6 + 320")], one) is None


def test_the_handler_asks_for_one_calculation_over_every_note(monkeypatch):
    pytest.importorskip("llama_cpp")
    from localmodel.handler import reach_tools_chat_handler
    from tests.localmodel.test_leaks import StandInLlama

    monkeypatch.setattr("localmodel.handler.TOOL_FIRST", True, raising=False)
    whole = "128 * 6 + 320 + 500 + 240"
    llama = StandInLlama(
        [
            'functions.calculate:\n{"expression": "500 + 240"}',
            f'functions.calculate:\n{{"expression": "{whole}"}}',
        ]
    )
    result = reach_tools_chat_handler(
        llama=llama,  # type: ignore[arg-type]
        messages=two_searches(COMBINED),
        tools=TOOLS,
        tool_choice="auto",
    )
    [call] = result["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"expression": whole}
    assert "Add them all up in one calculate call" in b"".join(llama.read).decode()


# -- a sum of two named things, one of them searched ----------------------------

NAMED_TWO = "Add together the budgets of the caching rework and the search experiment."


def test_a_sum_of_two_named_with_one_found_asks_for_the_other_search():
    """The model searched once, found the search experiment and calculated
    its 500 + 240 for the sum of two named budgets (it answered 740)."""
    one = searched(NAMED_TWO, "search experiment budget", BUDGET_NOTES[:1])
    asked = figures.unsearched_second_note([calculate("500 + 240")], one, TOOLS)
    assert asked is not None
    search, note = asked
    assert search == "search_notes"
    assert "搜索实验: 500 + 240" in note and "the other one" in note
    # In Chinese too.
    zh = searched(
        "缓存改造和搜索实验的预算加起来是多少？", "搜索实验", BUDGET_NOTES[:1]
    )
    assert figures.unsearched_second_note([calculate("500 + 240")], zh, TOOLS)


def test_the_other_search_is_asked_once_and_only_for_a_sum_of_two():
    sum_of_two = [calculate("500 + 240")]
    # A second search was made: what it found is what there is.
    twice = [
        *searched(NAMED_TWO, "search experiment", BUDGET_NOTES[:1]),
        *searched(NAMED_TWO, "caching rework", MISSED)[1:],
    ]
    twice[3]["tool_calls"][0]["id"] = twice[4]["tool_call_id"] = "s2"
    assert figures.unsearched_second_note(sum_of_two, twice, TOOLS) is None
    # One thing named, or no sum: nothing to search for.
    for question in (
        "What is the search experiment's budget?",
        "Add up the search experiment's budget.",
        "What are the caching rework and the search experiment about?",
    ):
        turn = searched(question, "search experiment", BUDGET_NOTES[:1])
        assert figures.unsearched_second_note(sum_of_two, turn, TOOLS) is None
    # Both found already: the one-calculation rule's case, not this one.
    assert (
        figures.unsearched_second_note(sum_of_two, two_searches(NAMED_TWO), TOOLS)
        is None
    )
    # No calculation, or no search tool offered.
    one = searched(NAMED_TWO, "search experiment budget", BUDGET_NOTES[:1])
    assert figures.unsearched_second_note([], one, TOOLS) is None
    assert figures.unsearched_second_note(sum_of_two, one, [CALCULATE]) is None


def test_the_handler_searches_for_the_second_named_note(monkeypatch):
    pytest.importorskip("llama_cpp")
    from localmodel.handler import reach_tools_chat_handler
    from tests.localmodel.test_leaks import StandInLlama

    monkeypatch.setattr("localmodel.handler.TOOL_FIRST", True, raising=False)
    llama = StandInLlama(
        [
            'functions.calculate:\n{"expression": "500 + 240"}',
            'functions.search_notes:\n{"query": "caching rework"}',
        ]
    )
    result = reach_tools_chat_handler(
        llama=llama,  # type: ignore[arg-type]
        messages=searched(NAMED_TWO, "search experiment budget", BUDGET_NOTES[:1]),
        tools=TOOLS,
        tool_choice="auto",
    )
    [call] = result["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "search_notes"
    assert json.loads(call["function"]["arguments"]) == {"query": "caching rework"}
    assert "Search the notes for the other one" in llama.prompts[-1].decode()


# -- the note an answer in another language is about ----------------------------

WHERE = "Where in the notes is an inverted index compared with something else?"
ABOUT_IT = "The search experiment compares an inverted index with vector retrieval."


def test_an_answer_in_english_about_a_chinese_note_cites_the_note_searched():
    """An English answer shares no character pair with the Chinese note, so the
    bigram match cites nothing; the search that found the note alone does."""
    turn = searched(WHERE, "inverted index 倒排索引", BUDGET_NOTES[:1])
    assert chatformat.source_line(ABOUT_IT, turn) is None
    assert answering.searched_source(ABOUT_IT, turn) == "Source: 搜索实验"


def test_no_note_is_cited_for_a_no_a_named_note_or_a_search_of_several():
    turn = searched(WHERE, "inverted index 倒排索引", BUDGET_NOTES[:1])
    for answer in (
        "No note compares an inverted index with anything.",
        "The notes do not say.",
        "搜索实验 compares an inverted index with vector retrieval.",  # named
        "It is about caching.",  # nothing of the search
        "",
    ):
        assert answering.searched_source(answer, turn) is None, answer
    several = searched(WHERE, "inverted index", BUDGET_NOTES)
    assert answering.searched_source(ABOUT_IT, several) is None
    # A result that answers no search (a calculator's) ties nothing.
    other = searched(WHERE, "inverted index", BUDGET_NOTES[:1], tool="calculate")
    assert answering.searched_source(ABOUT_IT, other) is None


def test_the_handler_adds_the_searched_notes_title(monkeypatch):
    result, _ = prompted(
        monkeypatch,
        [f"message:\n{ABOUT_IT}"],
        searched(WHERE, "inverted index 倒排索引", BUDGET_NOTES[:1]),
    )
    assert result["choices"][0]["message"]["content"] == (
        f"{ABOUT_IT}\n\nSource: 搜索实验"
    )


# -- another note's figure for the note asked about ------------------------------

LOGGING = {"title": "日志系统", "content": "使用文件轮转和定时归档，保留最近七天记录。"}
LOG_COST = "日志方案花多少钱？"


def test_another_notes_budget_for_a_note_without_one_is_caught():
    """The logging note gives no budget; the search also found the two budget
    notes, and the model had answered with the search experiment's."""
    turn = searched(LOG_COST, "日志 预算", [LOGGING, *BUDGET_NOTES])
    misread = figures.figure_of_another_note(None, [calculate("500 + 240")], turn)
    assert misread is not None
    assert "日志系统 gives none" in misread.note and "搜索实验" in misread.note
    assert misread.plain == "笔记里没有日志系统的这项数字：日志系统这条笔记没有给出。"
    assert figures.figure_of_another_note("日志方案的预算是 740。", [], turn)
    # An answer as if the note gave one, with no figure of another note.
    as_if = "日志系统的预算是文件轮转和定时归档，保留最近七天记录。"
    assert figures.figure_of_another_note(as_if, [], turn)
    # Saying it has none is right.
    assert figures.figure_of_another_note("日志系统没有给出预算。", [], turn) is None


def test_a_note_with_its_own_figure_a_sum_or_no_named_note_is_let_be():
    everything = [LOGGING, *BUDGET_NOTES]
    for question in (
        "向量检索那个实验的预算是多少？",  # 搜索实验 has its own
        "缓存改造和搜索实验的预算加起来是多少？",  # a sum
        "日志系统保留几天？",  # no figure asked
        "How much does the logging system cost?",  # no Chinese to match a title
        "项目的预算是多少？",  # no note named
    ):
        turn = searched(question, "预算", everything)
        assert (
            figures.figure_of_another_note(None, [calculate("500 + 240")], turn) is None
        ), question


def test_the_handler_asks_for_the_answer_without_the_other_notes_figure(
    monkeypatch,
):
    result, prompts = prompted(
        monkeypatch,
        [
            'functions.calculate:\n{"expression": "500 + 240"}',
            "message:\n日志系统没有给出预算。",
        ],
        searched(LOG_COST, "日志 预算", [LOGGING, *BUDGET_NOTES]),
    )
    assert result["choices"][0]["message"]["content"].startswith(
        "日志系统没有给出预算。"
    )
    assert "Tell the user that 日志系统 gives none" in prompts[-1].decode()


# -- "in total" over two named things --------------------------------------------

IN_TOTAL = "What do the caching rework and the search experiment cost in total?"


def test_in_total_over_two_named_things_is_a_sum():
    one = searched(IN_TOTAL, "caching rework 缓存重写", BUDGET_NOTES[1:])
    asked = figures.unsearched_second_note([calculate("128 * 6 + 320")], one, TOOLS)
    assert asked is not None and "缓存改造: 128 * 6 + 320" in asked[1]
    both = two_searches(IN_TOTAL)
    assert figures.uncombined_calculation([calculate("500 + 240")], both)


def test_a_search_missed_then_translated_counts_as_the_one_search():
    """As notes-sealed4 ran it: "caching rework" found nothing, its translation
    found the caching note, and the model calculated its budget alone."""
    turn = [
        *searched(IN_TOTAL, "caching rework", MISSED),
        *searched(IN_TOTAL, "caching rework 缓存重写", BUDGET_NOTES[1:])[1:],
    ]
    turn[3]["tool_calls"][0]["id"] = turn[4]["tool_call_id"] = "s2"
    asked = figures.unsearched_second_note([calculate("128 * 6 + 320")], turn, TOOLS)
    assert asked is not None
    # The search of the other one found nothing: what was found is what there is.
    after = [*turn, *searched(IN_TOTAL, "search experiment", MISSED)[1:]]
    after[5]["tool_calls"][0]["id"] = after[6]["tool_call_id"] = "s3"
    assert (
        figures.unsearched_second_note([calculate("128 * 6 + 320")], after, TOOLS)
        is None
    )


def test_a_total_of_one_thing_is_no_sum():
    for question in (
        "What does the caching plan cost in total?",
        # The demo question: "and" joins two requests, the total is one note's.
        "Which project note mentions Redis? Find its budget expression and "
        "compute the total.",
    ):
        both = two_searches(question)
        assert (
            figures.uncombined_calculation([calculate("128 * 6 + 320")], both) is None
        )
        one = searched(question, "Redis", BUDGET_NOTES[1:])
        assert (
            figures.unsearched_second_note([calculate("128 * 6 + 320")], one, TOOLS)
            is None
        )


# -- a difference of two notes' figures ------------------------------------------

GAP = (
    "What is the gap between the caching rework's budget and the search "
    "experiment's budget?"
)


def test_a_difference_not_stated_is_asked_of_the_calculator():
    """Both budgets worked out (1088 and 740), and the answer gave 740."""
    turn = two_searches(GAP)
    note = figures.uncomputed_difference("The gap is 740.", [], turn)
    assert note is not None
    assert "缓存改造: 128 * 6 + 320 = 1088" in note and "Calculate 1088 - 740" in note
    assert figures.uncomputed_difference("The gap is 348.", [], turn) is None
    # In Chinese, and whichever way round it is asked.
    zh = two_searches("搜索实验比缓存改造便宜多少？")
    assert "1088 - 740" in (figures.uncomputed_difference("便宜 740。", [], zh) or "")


def test_a_sum_a_call_or_one_note_found_is_no_difference_to_work_out():
    turn = two_searches(GAP)
    assert figures.uncomputed_difference(None, [calculate("1088 - 740")], turn) is None
    assert (
        figures.uncomputed_difference("It is 740.", [], two_searches(COMBINED)) is None
    )
    one = searched(GAP, "search experiment", BUDGET_NOTES[:1])
    assert figures.uncomputed_difference("The gap is 740.", [], one) is None


def worked_out(
    turn: list[dict[str, Any]], *results: tuple[str, int]
) -> list[dict[str, Any]]:
    """``turn`` and then a ``calculate`` call and its result for each
    (expression, value)."""
    for n, (expression, value) in enumerate(results):
        call = calculate(expression, f"k{n}")
        turn = [
            *turn,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {
                "role": "tool",
                "tool_call_id": f"k{n}",
                "content": json.dumps({"expression": expression, "result": value}),
            },
        ]
    return turn


def test_the_handler_asks_the_calculator_for_the_difference(monkeypatch):
    """As in the trace: both budgets worked out, and the answer gave one."""
    turn = worked_out(two_searches(GAP), ("128 * 6 + 320", 1088), ("500 + 240", 740))
    result, prompts = prompted(
        monkeypatch,
        [
            "message:\nThe gap is 740.",
            'functions.calculate:\n{"expression": "1088 - 740"}',
        ],
        turn,
    )
    [call] = result["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"expression": "1088 - 740"}
    assert "Calculate 1088 - 740" in prompts[-1].decode()


# -- a figure after every search found nothing -----------------------------------


def test_a_figure_after_every_search_missed_is_answered_plainly(monkeypatch):
    """Two searches for the logging system found nothing (the second with a
    translation), and the model answered "set aside for $10,000", asked again
    for a call, repeated its search, and answered it again."""
    asked = "How much money is set aside for the logging system?"
    turn = [
        *searched(asked, "logging system", MISSED),
        *searched(asked, "logging system 森林管理", MISSED)[1:],
    ]
    turn[3]["tool_calls"][0]["id"] = turn[4]["tool_call_id"] = "s2"
    made_up = "message:\nThe logging system is set aside for $10,000."
    again = 'functions.search_notes:\n{"query": "logging system 森林管理"}'
    result, _ = prompted(monkeypatch, [made_up, again, made_up], turn)
    assert result["choices"][0]["message"]["content"] == answering.nothing_found(turn)


def test_once_both_figures_are_worked_out_another_calculation_is_the_difference():
    """Asked 缓存改造比搜索实验多花多少钱？, the model worked out both budgets and
    then went on adding and subtracting them for ten calls."""
    question = "缓存改造比搜索实验多花多少钱？"
    both = worked_out(
        two_searches(question), ("500 + 240", 740), ("128 * 6 + 320", 1088)
    )
    note = figures.uncomputed_difference(None, [calculate("740 + 1088")], both)
    assert note is not None and "Calculate 1088 - 740" in note
    # The difference itself, either way round, or in one expression, is let be.
    for expression in ("1088 - 740", "740 - 1088", "128 * 6 + 320 - (500 + 240)"):
        assert (
            figures.uncomputed_difference(None, [calculate(expression)], both) is None
        )
    # Before both are worked out, the model is on its way.
    one = worked_out(two_searches(question), ("500 + 240", 740))
    assert (
        figures.uncomputed_difference(None, [calculate("128 * 6 + 320")], one) is None
    )


# -- a span of time no note gives ------------------------------------------------


def test_how_long_answered_with_a_figure_no_note_gives_as_a_span_is_caught():
    for question, answer in (
        ("How many days of data does the search experiment keep?", "740 days."),
        ("缓存改造打算保留多少天的数据？", "缓存改造打算保留128天的数据。"),
    ):
        turn = searched(question, "搜索实验 缓存改造", BUDGET_NOTES)
        misread = unstated.span_not_given(answer, [], turn)
        assert misread is not None, question
        assert "do not say how long" in misread.note, question


def test_how_long_with_a_note_that_gives_a_span_or_no_figure_is_let_be():
    kept = searched("日志会保留多少天？", "日志", [LOGGING])
    assert unstated.span_not_given("日志保留 7 天。", [], kept) is None
    budgets = searched("How long is the search experiment?", "搜索实验", BUDGET_NOTES)
    assert unstated.span_not_given("The notes do not say.", [], budgets) is None
    assert unstated.span_not_given(None, [calculate("500 + 240")], budgets) is None
    # Not a question of how long.
    cost = searched("What is the search experiment's budget?", "搜索实验", BUDGET_NOTES)
    assert unstated.span_not_given("740.", [], cost) is None


def test_the_handler_asks_for_the_answer_when_no_note_gives_the_span(monkeypatch):
    turn = searched("缓存改造打算保留多少天的数据？", "缓存改造", BUDGET_NOTES[1:])
    result, prompts = prompted(
        monkeypatch,
        [
            "message:\n缓存改造打算保留128天的数据。",
            "message:\n笔记里没有提到保留多少天。",
        ],
        turn,
    )
    assert result["choices"][0]["message"]["content"].startswith("笔记里没有提到")
    assert "do not say how long" in prompts[-1].decode()


# -- an answer after every search found nothing ----------------------------------


def test_an_answer_that_does_not_say_nothing_was_found_says_so_first(monkeypatch):
    """After two searches for Grafana found nothing, the model described
    Grafana from what it knows."""
    asked = "Is Grafana mentioned in any note?"
    turn = [
        *searched(asked, "Grafana", MISSED),
        *searched(asked, "Grafana 监控工具", MISSED)[1:],
    ]
    turn[3]["tool_calls"][0]["id"] = turn[4]["tool_call_id"] = "s2"
    general = "Grafana 是一个用于监控和可视化数据的开源工具。"
    result, _ = prompted(monkeypatch, [f"message:\n{general}"], turn)
    assert result["choices"][0]["message"]["content"] == (
        f"{answering.nothing_found(turn)}\n\n{general}"
    )
    # An answer that says so is left as it is.
    said = "Sorry, I can't find any note that mentions Grafana."
    result, _ = prompted(monkeypatch, [f"message:\n{said}"], turn)
    assert result["choices"][0]["message"]["content"] == said


# -- notes-sealed6's misses ------------------------------------------------------


def test_a_comparison_or_an_add_to_of_two_named_things_searches_both():
    """ "How much more … than …" searched one and answered its 740; "add …
    to …" named two without an "and"."""
    for question, found, expression in (
        (
            "How much more does the caching rework cost than the search experiment?",
            BUDGET_NOTES[:1],
            "500 + 240",
        ),
        (
            "If you add the Redis plan's budget to the search experiment's, what do "
            "you get?",
            BUDGET_NOTES[1:],
            "128 * 6 + 320",
        ),
    ):
        turn = searched(question, "one of them", found)
        asked = figures.unsearched_second_note([calculate(expression)], turn, TOOLS)
        assert asked is not None, question


def test_a_made_up_error_object_as_the_answer_is_asked_again():
    """After two searches found the logging note, the model answered with an
    error object of its own."""
    turn = searched("How long do the notes say logs are retained?", "日志", [LOGGING])
    written = '{"error": "No notes found for the keyword \'logs retention\'."}'
    note = answering.error_as_answer(written, turn)
    assert note is not None and "保留最近七天记录" in note
    assert answering.error_as_answer("Logs are kept for seven days.", turn) is None
    assert (
        answering.error_as_answer('{"error": "x"}', searched("?", "日志", MISSED))
        is None
    )


def test_the_handler_asks_again_for_an_error_object_answer(monkeypatch):
    turn = searched("How long do the notes say logs are retained?", "日志", [LOGGING])
    written = '{"error": "No notes found for the keyword \'logs retention\'."}'
    result, prompts = prompted(
        monkeypatch,
        [f"message:\n{written}", "message:\nThe logs are kept for seven days."],
        turn,
    )
    assert result["choices"][0]["message"]["content"].startswith(
        "The logs are kept for seven days."
    )
    assert "not as data" in prompts[-1].decode()


def test_an_answer_asked_for_after_a_repeated_call_is_held_to_the_figure_rules(
    monkeypatch,
):
    """Most answers of a turn with figures come after a call made again: the
    span answered with the caching budget came that way."""
    question = "How long does the caching rework keep cached entries?"
    turn = worked_out(
        searched(question, "caching rework 缓存重做", BUDGET_NOTES[1:]),
        ("128 * 6 + 320", 1088),
    )
    result, prompts = prompted(
        monkeypatch,
        [
            'functions.calculate:\n{"expression": "128 * 6 + 320"}',
            "message:\n缓存改造的预算表达式为 128 * 6 + 320，计算结果是 1088。",
            "message:\nThe notes do not say how long cached entries are kept.",
        ],
        turn,
    )
    assert result["choices"][0]["message"]["content"].startswith(
        "The notes do not say how long"
    )
    assert "do not say how long" in prompts[-1].decode()


def test_a_figure_said_again_after_being_told_is_answered_plainly(monkeypatch):
    """Told that the logging note gives no budget, the model said the same
    again; the answer is then the plain fact."""
    turn = searched("日志系统的预算是多少？", "日志系统", [LOGGING])
    as_if = "message:\n日志系统的预算是文件轮转和定时归档，保留最近七天记录。"
    result, prompts = prompted(monkeypatch, [as_if, as_if], turn)
    assert result["choices"][0]["message"]["content"].startswith(
        "笔记里没有日志系统的这项数字"
    )
    assert "Tell the user that 日志系统 gives none" in prompts[-1].decode()
    # Told, and answered rightly: that answer stands.
    result, _ = prompted(monkeypatch, [as_if, "message:\n日志系统没有给出预算。"], turn)
    assert result["choices"][0]["message"]["content"].startswith(
        "日志系统没有给出预算。"
    )


def test_a_span_said_again_after_being_told_is_answered_plainly(monkeypatch):
    asked = "How long will the search experiment run?"
    turn = worked_out(searched(asked, "搜索实验", BUDGET_NOTES[:1]), ("500 + 240", 740))
    budget = "message:\n搜索实验的预算表达式为 500 + 240，计算结果是 740。"
    result, _ = prompted(monkeypatch, [budget, budget], turn)
    assert result["choices"][0]["message"]["content"].startswith(
        "The notes do not say how long: the notes found (搜索实验)"
    )


# -- notes-sealed8's misses ------------------------------------------------------

#: search_notes' hint when nothing matched (effects/builtins.py).
NOTHING_MATCHED = {
    "error": "Nothing matched: no note mentions any word of 'search experiment'. "
    "Search again with other words (one name or term works best; the notes may be "
    "written in another language), or tell the user the notes do not say."
}
HOW_MUCH_MORE = "How much more does the caching rework cost than the search experiment?"


def test_a_second_search_that_found_nothing_is_translated_too():
    """The first search of a question about two notes was translated and found
    one; the second, "caching rework", found nothing and was answered from the
    first note alone (3 of 3)."""
    turn = [
        *searched(HOW_MUCH_MORE, "search experiment", NOTHING_MATCHED),
        *searched(HOW_MUCH_MORE, "search experiment 实验", BUDGET_NOTES[:1])[1:],
        *searched(HOW_MUCH_MORE, "caching rework", NOTHING_MATCHED)[1:],
    ]
    for at, call_id in ((3, "s2"), (5, "s3")):
        turn[at]["tool_calls"][0]["id"] = turn[at + 1]["tool_call_id"] = call_id
    miss = answering.missed_search(turn, TOOLS)
    assert miss is not None and (miss.words, miss.into) == ("caching rework", "zh")
    # The same words again, once tried in both scripts, are not.
    again = [*turn[:5], *searched(HOW_MUCH_MORE, "search experiment", MISSED)[1:]]
    again[5]["tool_calls"][0]["id"] = again[6]["tool_call_id"] = "s3"
    assert answering.missed_search(again, TOOLS) is None


def test_an_answer_that_says_what_the_hint_suggests_is_no_echo():
    """Told that no note speaks of a span, the model said "the notes do not
    provide …", the hint's own suggestion; asked again as an echo, it gave the
    budget as the span."""
    turn = searched("How long will the search experiment run?", "x", NOTHING_MATCHED)
    said = (
        "Sorry, the notes do not provide information about how long the search "
        "experiment will run."
    )
    assert not answering.echoed_hint(said, turn)
    assert answering.echoed_hint("Search again with other words, please.", turn)


def test_a_right_answer_after_being_told_is_kept(monkeypatch):
    """The whole of that run: the span rule tells the model, and its answer is
    the one given (it had been replaced by a third ask's 740)."""
    question = "How long will the search experiment run?"
    turn = worked_out(
        [
            *searched(question, "search experiment", NOTHING_MATCHED),
            *searched(question, "search experiment 实验", BUDGET_NOTES[:1])[1:],
        ],
        ("500 + 240", 740),
    )
    turn[3]["tool_calls"][0]["id"] = turn[4]["tool_call_id"] = "s2"
    said = (
        "Sorry, the notes do not provide information about how long the search "
        "experiment will run."
    )
    result, prompts = prompted(
        monkeypatch,
        [
            "message:\nThe search experiment will run for 740 minutes.",
            f"message:\n{said}",
        ],
        turn,
    )
    assert result["choices"][0]["message"]["content"] == said
    assert "do not say how long" in prompts[-1].decode()


CACHE_DUE = "When is the caching rework due to be finished?"


def test_when_it_is_due_answered_when_no_note_gives_a_date_is_caught():
    turn = worked_out(
        searched(CACHE_DUE, "caching rework 缓存重做", BUDGET_NOTES[1:]),
        ("128 * 6 + 320", 1088),
    )
    for answer in (
        "The caching rework is due to be finished in 1088 days.",
        "It is due once the Redis cache is in place.",
    ):
        misread = unstated.date_not_given(answer, [], turn)
        assert misread is not None, answer
        assert "do not say when" in misread.note
        assert misread.plain.startswith("The notes do not say when")
    assert unstated.date_not_given("The notes do not say when.", [], turn) is None
    # A note that gives a date, and a "when" that asks for no date.
    due = {"title": "缓存改造", "content": "6月30日截止"}
    dated = searched(CACHE_DUE, "缓存", [due])
    assert unstated.date_not_given("June 30.", [], dated) is None
    archive = searched("When are old logs archived?", "日志", [LOGGING])
    assert unstated.date_not_given("定时归档。", [], archive) is None


def test_who_answered_when_no_note_names_anyone_is_caught(monkeypatch):
    """搜索实验由谁负责？ was answered with a team the note does not name (3 of 3)."""
    question = "搜索实验由谁负责？"
    turn = searched(question, "实验", BUDGET_NOTES[:1])
    made_up = "实验由比较倒排索引与向量检索的团队负责。"
    misread = unstated.person_not_given(made_up, [], turn)
    assert misread is not None and "do not say who" in misread.note
    assert misread.plain == "笔记里没有提到负责人：找到的笔记（搜索实验）没有说是谁。"
    assert unstated.person_not_given("笔记没有说由谁负责。", [], turn) is None
    owner = {"title": "搜索实验", "content": "由平台团队负责"}
    named = searched(question, "实验", [owner])
    assert unstated.person_not_given("平台团队。", [], named) is None
    # "Whose" asks for a note, not a person.
    whose = searched("谁的预算更高？", "预算", BUDGET_NOTES)
    assert unstated.person_not_given("缓存改造。", [], whose) is None
    # Said again after being told: the plain answer.
    result, _ = prompted(
        monkeypatch, [f"message:\n{made_up}", f"message:\n{made_up}"], turn
    )
    assert result["choices"][0]["message"]["content"].startswith(misread.plain)


# -- notes-sealed9's misses ------------------------------------------------------


def test_a_sum_answered_without_its_total_asks_for_the_calculation(monkeypatch):
    """Both notes found, the model answered "500 + 128 * 6 + 320 = 4720" without
    a call (3 of 3)."""
    question = "What do the search experiment and the Redis caching plan cost together?"
    turn = two_searches(question)
    wrong = "Together they cost 500 + 128 * 6 + 320 = 4720."
    note = figures.unstated_total(wrong, [], turn)
    assert note is not None and "Add them all up in one calculate call" in note
    assert "500 + 240" in note and "128 * 6 + 320" in note
    assert figures.unstated_total("Together they cost 1828.", [], turn) is None
    assert figures.unstated_total(None, [calculate("500 + 240")], turn) is None
    # Not a sum, or one note found.
    assert figures.unstated_total(wrong, [], two_searches("Which is larger?")) is None
    one = searched(question, "Redis", BUDGET_NOTES[1:])
    assert figures.unstated_total(wrong, [], one) is None
    # The handler asks for that calculation, here of an answer asked for after
    # a search made again (the way it came in the run).
    result, prompts = prompted(
        monkeypatch,
        [
            'functions.search_notes:\n{"query": "倒排索引实验"}',
            f"message:\n{wrong}",
            'functions.calculate:\n{"expression": "(500 + 240) + (128 * 6 + 320)"}',
        ],
        turn,
    )
    assert call_of(result) == (
        "calculate",
        {"expression": "(500 + 240) + (128 * 6 + 320)"},
    )
    assert "Add them all up" in prompts[-1].decode()


def test_the_one_note_found_is_the_one_an_english_question_asks_about():
    """ "How much will the logging system cost?" found 日志系统 alone and was
    answered "$10,000 per year" (3 of 3)."""
    turn = searched("How much will the logging system cost?", "logging 日志", [LOGGING])
    misread = figures.figure_of_another_note(
        "The logging system will cost $10,000 per year.", [], turn
    )
    assert misread is not None and "日志系统 gives none" in misread.note
    assert misread.plain.startswith("The notes give no such figure for 日志系统")
    assert figures.figure_of_another_note("It does not say.", [], turn) is None
    # With two notes found and none named, no note is the one asked about.
    both = searched("How much will it cost?", "x", [LOGGING, BUDGET_NOTES[0]])
    assert figures.figure_of_another_note("It costs 10.", [], both) is None


def test_a_comparison_asked_as_which_costs_more_searches_both():
    question = (
        "Which costs more, the Redis caching plan or the search experiment, and by "
        "how much?"
    )
    turn = searched(question, "Redis", BUDGET_NOTES[1:])
    second = figures.unsearched_second_note([calculate("128 * 6 + 320")], turn, TOOLS)
    assert second is not None and second[0] == "search_notes"


def test_the_question_written_back_is_asked_again(monkeypatch):
    question = (
        "The search experiment gives its budget as an expression. What does it come to?"
    )
    turn = worked_out(
        searched(question, "search experiment 实验", BUDGET_NOTES[:1]),
        ("500 + 240", 740),
    )
    assert answering.repeats_question(question, turn)
    assert answering.repeats_question(f"“{question}”", turn)
    # An answer that says it again and answers it, or quotes a part of it, is one.
    answer = f"{question} It comes to 740, from 500 + 240."
    assert not answering.repeats_question(answer, turn)
    assert not answering.repeats_question("The search experiment.", turn)
    result, prompts = prompted(
        monkeypatch,
        [f"message:\n{question}", "message:\nIt comes to 740."],
        turn,
    )
    assert result["choices"][0]["message"]["content"].startswith("It comes to 740.")
    assert answering.ANSWER_IT in prompts[-1].decode()


# -- notes-sealed10's made-up size after a call made again ------------------------

GIGABYTES = "How many gigabytes of logs does the logging system store?"


def test_a_figure_nothing_holds_is_found_and_the_notes_own_figures_are_not():
    turn = searched(GIGABYTES, "logging system 日志系统", [LOGGING])
    invented = unstated.invented_figure("About 10 gigabytes of logs.", [], turn)
    assert invented is not None
    assert "No note found gives 10" in invented.note and "保留最近七天" in invented.note
    assert invented.plain == (
        "The notes do not give that figure: the notes found (日志系统) do not say."
    )
    # 七天 is seven days, in digits too; a call is no answer; nothing found is
    # the rule for searches that all missed.
    assert unstated.invented_figure("Logs are kept for 7 days.", [], turn) is None
    assert unstated.invented_figure("日志保留最近7天的记录。", [], turn) is None
    assert unstated.invented_figure("It keeps the last 7.", [], turn) is None
    # …and counts days only: "7 gigabytes" is no figure of the note (1 of 4).
    seven = unstated.invented_figure("About 7 gigabytes of logs.", [], turn)
    assert seven is not None and "No note found gives 7" in seven.note
    kept = "It keeps 7 days, about 7 gigabytes."
    assert unstated.invented_figure(kept, [], turn) is not None
    assert unstated.invented_figure(None, [calculate("10 * 1")], turn) is None
    missed = searched(GIGABYTES, "gigabytes", MISSED)
    assert unstated.invented_figure("About 10 gigabytes.", [], missed) is None


def test_a_total_worked_out_in_the_head_is_no_invented_figure():
    both = searched("What do both plans cost together?", "预算", BUDGET_NOTES)
    assert unstated.invented_figure("Together they cost 1828.", [], both) is None
    assert unstated.invented_figure("The gap is 348.", [], both) is None
    assert unstated.invented_figure("The caching rework costs 1088.", [], both) is None
    assert unstated.invented_figure("Together they cost 1900.", [], both) is not None
    kept = [{"title": "日志", "content": "保留十二个月"}]
    zh = searched("日志保留几个月？", "日志", kept)
    assert unstated.invented_figure("日志保留 12 个月。", [], zh) is None


def test_a_figure_invented_after_a_call_made_again_is_told_then_answered_plainly(
    monkeypatch,
):
    """The made-up-number check asked for a call, the model searched again,
    and the answer asked for then gave the made-up size again (3 of 3)."""
    turn = searched(GIGABYTES, "logging system 日志系统", [LOGGING])
    size = "message:\nThe logging system stores approximately 10 gigabytes of logs."
    again = 'functions.search_notes:\n{"query": "logging system 日志系统"}'
    result, prompts = prompted(monkeypatch, [size, again, size, size], turn)
    assert result["choices"][0]["message"]["content"].startswith(
        "The notes do not give that figure: the notes found (日志系统) do not say."
    )
    assert "No note found gives 10" in prompts[-1].decode()
    # Told, and answered rightly: that answer stands.
    right = "message:\nThe notes do not say how much the logging system stores."
    result, _ = prompted(monkeypatch, [size, again, size, right], turn)
    assert result["choices"][0]["message"]["content"].startswith(
        "The notes do not say how much"
    )


def test_a_figure_invented_after_the_question_written_back_is_held_the_same(
    monkeypatch,
):
    """Asked for the answer after a call made again, the model wrote the
    question back; asked once more, it gave the made-up size, which only the
    figure rules held (4 of 4 on c3f878c)."""
    turn = searched(GIGABYTES, "logging system 日志系统", [LOGGING])
    size = "message:\nThe logging system stores approximately 10 gigabytes of logs."
    again = 'functions.search_notes:\n{"query": "logging system 日志系统"}'
    echo = f"message:\n{GIGABYTES}"
    result, prompts = prompted(monkeypatch, [size, again, echo, size, size], turn)
    assert result["choices"][0]["message"]["content"].startswith(
        "The notes do not give that figure: the notes found (日志系统) do not say."
    )
    assert answering.ANSWER_IT in prompts[-2].decode()
    assert "No note found gives 10" in prompts[-1].decode()


# -- notes-sealed10's "bill": a search of what the question wants ----------------

BILL = "If we fund both the caching rework and the search experiment, what's the bill?"


def test_a_search_of_the_questions_aim_alone_is_tried_with_its_subject():
    """ "bill" was searched, found nothing, and was translated to 账单, which
    found nothing either (2 of 3): the question's own words are tried instead."""
    miss = answering.missed_search(searched(BILL, "bill", NOTHING_MATCHED), TOOLS)
    assert miss == answering.Miss(
        "search_notes", "query", "fund caching rework search experiment", "zh", BILL
    )
    # Words that name something are translated as they are.
    named = answering.missed_search(
        searched(BILL, "caching rework bill", NOTHING_MATCHED), TOOLS
    )
    assert named is not None and named.words == "caching rework bill"
    # A Chinese question is searched by its own words: no subject to take.
    zh = searched("两个方案一共花多少？", "budget", NOTHING_MATCHED)
    assert answering.missed_search(zh, TOOLS) is None


# -- notes-sealed11's misses -----------------------------------------------------

HEADCOUNT = "How many engineers are working on the search experiment?"


def test_a_headcount_no_note_gives_is_caught_and_one_a_note_gives_is_not():
    turn = worked_out(
        searched(HEADCOUNT, "搜索实验", BUDGET_NOTES[:1]), ("500 + 240", 740)
    )
    misread = unstated.headcount_not_given(
        "There are 740 engineers working on the search experiment.", [], turn
    )
    assert misread is not None
    assert "how many people" in misread.note and "500 + 240" in misread.note
    assert misread.plain.startswith("The notes do not say how many people")
    # The plain answer is one no rule asks again.
    assert all(rule(misread.plain, [], turn) is None for rule in unstated.UNSTATED)
    staffed = searched(
        HEADCOUNT, "搜索实验", [{"title": "搜索实验", "content": "三人负责"}]
    )
    assert unstated.headcount_not_given("Three engineers.", [], staffed) is None
    zh = searched("搜索实验有多少人？", "搜索实验", BUDGET_NOTES[:1])
    told = unstated.headcount_not_given("搜索实验有740人。", [], zh)
    assert told is not None and told.plain.startswith("笔记里没有提到人数")


def test_a_headcount_answered_with_a_budget_is_told_then_answered_plainly(
    monkeypatch,
):
    turn = worked_out(
        searched(HEADCOUNT, "搜索实验", BUDGET_NOTES[:1]), ("500 + 240", 740)
    )
    made_up = "message:\nThere are 740 engineers working on the search experiment."
    result, prompts = prompted(monkeypatch, [made_up, made_up], turn)
    assert result["choices"][0]["message"]["content"].startswith(
        "The notes do not say how many people: the notes found (搜索实验)"
    )
    assert "do not say how many people" in prompts[-1].decode()


WORK_OUT = "Work out the search experiment's budget for me."


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        ("search_experiment_budget", True),
        ("`search_experiment_budget`.", True),
        ("The search experiment's budget is 740.", False),
        ("Redis", False),
        ("740", False),
        ("", False),
    ],
)
def test_a_name_in_code_as_the_whole_answer_is_found(answer, named):
    assert answering.identifier_as_answer(answer) is named


def test_a_name_as_the_answer_is_asked_again_for_a_sentence(monkeypatch):
    """Both budgets calculated, the model answered search_experiment_budget
    (3 of 3)."""
    turn = worked_out(
        searched(WORK_OUT, "search experiment budget 实验预算", BUDGET_NOTES),
        ("500 + 240", 740),
        ("128 * 6 + 320", 1088),
    )
    result, prompts = prompted(
        monkeypatch,
        ["message:\nsearch_experiment_budget", "message:\nThe budget is 740."],
        turn,
    )
    assert result["choices"][0]["message"]["content"].startswith("The budget is 740.")
    assert "Your reply was a name, not an answer" in prompts[-1].decode()


# -- notes-sealed12's misses -----------------------------------------------------

LOGGING_BUDGET = "What is the logging system's budget?"


def test_the_note_the_search_words_name_is_the_one_asked_about():
    """ "logging system budget 日志系统预算" found all three notes and names
    日志系统 alone; the answer was the search experiment's 740 (3 of 3)."""
    found = [LOGGING, *BUDGET_NOTES]
    turn = worked_out(
        searched(LOGGING_BUDGET, "logging system budget 日志系统预算", found),
        ("500 + 240", 740),
    )
    misread = figures.figure_of_another_note(
        "The logging system's budget is 740 units.", [], turn
    )
    assert misread is not None and "asks about 日志系统" in misread.note
    assert misread.plain.startswith("The notes give no such figure for 日志系统")
    # Search words that name no note, or two, leave it to the other rules.
    vague = searched(LOGGING_BUDGET, "budget 预算", found)
    assert figures.figure_of_another_note("It is 740.", [], vague) is None


def test_the_logging_budget_answered_with_another_notes_is_answered_plainly(
    monkeypatch,
):
    turn = searched(
        LOGGING_BUDGET, "logging system 日志系统预算", [LOGGING, *BUDGET_NOTES]
    )
    other = 'functions.calculate:\n{"expression": "500 + 240"}'
    result, prompts = prompted(
        monkeypatch, [other, "message:\nThe budget is 740 units."], turn
    )
    assert result["choices"][0]["message"]["content"].startswith(
        "The notes give no such figure for 日志系统"
    )
    assert "Tell the user that 日志系统 gives none" in prompts[-1].decode()


IN_REDIS = "What does the team plan to put in Redis?"


def test_a_calculation_for_a_question_that_asks_no_figure_is_caught():
    turn = searched(IN_REDIS, "Redis", BUDGET_NOTES[1:])
    misread = figures.figure_not_asked(None, [calculate("128 * 6 + 320")], turn)
    assert misread is not None and "asks for no figure" in misread.note
    assert misread.plain == (
        "The notes found say: 缓存改造: 使用 Redis 缓存热点查询，"
        "预算表达式为 128 * 6 + 320。"
    )
    computed = worked_out(turn, ("128 * 6 + 320", 1088))
    told = figures.figure_not_asked(
        "The team plans to put 1088 in Redis.", [], computed
    )
    assert told is not None
    # A sentence from the note, or a question that asks for a figure, is let be.
    said = "The team caches hot queries in Redis."
    assert figures.figure_not_asked(said, [], computed) is None
    for asked in ("How much will the Redis work cost?", "Redis 方案预算多少？"):
        costs = searched(asked, "Redis", BUDGET_NOTES[1:])
        assert (
            figures.figure_not_asked(None, [calculate("128 * 6 + 320")], costs) is None
        )


def test_a_notes_expression_told_again_gives_what_the_notes_say(monkeypatch):
    """Told that the question asks for no figure, the model answered "The
    team plans to put 128 * 6 + 320 in Redis." (seen in the chat page)."""
    turn = searched(IN_REDIS, "Redis", BUDGET_NOTES[1:])
    quoted = "The team plans to put 128 * 6 + 320 in Redis."
    assert figures.figure_not_asked(quoted, [], turn) is not None
    result, _ = prompted(
        monkeypatch,
        [
            'functions.calculate:\n{"expression": "128 * 6 + 320"}',
            f"message:\n{quoted}",
        ],
        turn,
    )
    assert result["choices"][0]["message"]["content"].startswith(
        "The notes found say: 缓存改造: 使用 Redis 缓存热点查询"
    )


def test_a_calculated_answer_to_a_question_asking_none_is_asked_again(monkeypatch):
    turn = searched(IN_REDIS, "Redis", BUDGET_NOTES[1:])
    result, prompts = prompted(
        monkeypatch,
        [
            'functions.calculate:\n{"expression": "128 * 6 + 320"}',
            "message:\nThe team plans to cache hot queries in Redis.",
        ],
        turn,
    )
    assert result["choices"][0]["message"]["content"].startswith(
        "The team plans to cache hot queries in Redis."
    )
    assert "asks for no figure" in prompts[-1].decode()


WHICH_DATABASE = "日志系统用的是哪个数据库？"


def test_which_thing_no_note_found_names_is_told():
    turn = searched(WHICH_DATABASE, "日志系统", [LOGGING])
    told = unstated.thing_not_named("日志系统用的是文件轮转和定时归档。", [], turn)
    assert told is not None and "No note found names a 数据库" in told.note
    # No note found holds a name in Latin letters: the plain answer says so.
    assert told.plain is not None
    assert told.plain.startswith("笔记没有说是哪个数据库。找到的笔记写道：日志系统: ")
    # Said so already, or named in a note, or a kind of thing any note is: let be.
    assert unstated.thing_not_named("笔记里没有提到数据库。", [], turn) is None
    redis = searched("缓存改造用的是什么缓存？", "缓存改造", BUDGET_NOTES[1:])
    assert unstated.thing_not_named("Redis。", [], redis) is None
    plan = searched("日志用的是哪个方案？", "日志", [LOGGING])
    assert unstated.thing_not_named("日志系统。", [], plan) is None
    # In English, only over notes written in English.
    english = [{"title": "Logs", "content": "Rotated daily, kept for a week."}]
    asked = "Which database stores the logs?"
    told = unstated.thing_not_named(
        "Rotated daily.", [], searched(asked, "logs", english)
    )
    assert told is not None and "names a database" in told.note
    assert told.plain is None  # an English note's names look like any word
    chinese = searched(asked, "日志", [LOGGING])
    assert unstated.thing_not_named("File rotation.", [], chinese) is None


def test_which_thing_is_told_once_and_the_told_answer_stands(monkeypatch):
    turn = searched(WHICH_DATABASE, "日志系统", [LOGGING])
    result, prompts = prompted(
        monkeypatch,
        [
            "message:\n日志系统用的是文件轮转和定时归档。",
            "message:\n笔记里没有提到数据库。",
        ],
        turn,
    )
    assert result["choices"][0]["message"]["content"].startswith(
        "笔记里没有提到数据库。"
    )
    assert "No note found names a 数据库" in prompts[-1].decode()


def test_which_thing_said_the_same_way_again_is_answered_plainly(monkeypatch):
    """日志系统用的是哪个数据库？ was answered with the note's words about rotating
    files again after being told (3 of 3)."""
    turn = searched(WHICH_DATABASE, "日志系统", [LOGGING])
    again = "message:\n日志系统使用文件轮转和定时归档，保留最近七天记录。"
    result, _ = prompted(monkeypatch, [again, again], turn)
    content = result["choices"][0]["message"]["content"]
    assert content.startswith("笔记没有说是哪个数据库。找到的笔记写道：日志系统: ")


def test_which_thing_a_latin_name_could_be_keeps_the_told_answer(monkeypatch):
    # Redis may be the database the question asks for: no plain answer.
    turn = searched("缓存改造用的是哪个数据库？", "缓存改造", BUDGET_NOTES[1:])
    again = "message:\n缓存改造使用 Redis 缓存热点查询。"
    result, prompts = prompted(monkeypatch, [again, again], turn)
    content = result["choices"][0]["message"]["content"]
    assert content.startswith("缓存改造使用 Redis 缓存热点查询。")
    assert "No note found names a 数据库" in prompts[-1].decode()


# -- a total names every note it adds up ------------------------------------------


def totalled(question: str, expression: str, result: float) -> list[dict[str, Any]]:
    """A turn: both budget notes found, then one calculation and its result."""
    return [
        *searched(question, "预算", BUDGET_NOTES),
        {"role": "assistant", "content": None, "tool_calls": [calculate(expression)]},
        {
            "role": "tool",
            "tool_call_id": "k1",
            "content": json.dumps({"expression": expression, "result": result}),
        },
    ]


BOTH = "把两个有预算的方案加在一起，总共要多少钱？"


def test_a_total_over_two_notes_cites_both():
    """The total had been cited as 缓存改造 alone: the pairs its digits share
    with that note's expression were the only ones it shared with any note."""
    turn = totalled(BOTH, "500 + 240 + (128 * 6 + 320)", 1828)
    assert chatformat.source_line("总共要1828元。", turn) == "来源：缓存改造"
    assert (
        figures.calculated_source("总共要1828元。", turn) == "来源：搜索实验、缓存改造"
    )
    # The notes' values added up are their figures too.
    by_value = totalled("What do both cost together?", "740 + 1088", 1828)
    assert figures.calculated_source("1828 in all.", by_value) == (
        "Sources: 搜索实验, 缓存改造"
    )
    # One note's expression worked out cites that note alone.
    one = totalled("缓存改造的预算是多少？", "128 * 6 + 320", 1088)
    assert figures.calculated_source("预算是1088。", one) == "来源：缓存改造"


def test_no_total_is_cited_without_its_figure_or_with_a_note_named():
    turn = totalled(BOTH, "500 + 240 + (128 * 6 + 320)", 1828)
    for answer in (
        "总共要1800元。",  # not the calculation's figure
        "缓存改造和搜索实验一共1828。",  # names the notes itself
        "",
    ):
        assert figures.calculated_source(answer, turn) is None, answer
    # A calculation over figures of no note found cites nothing.
    other = totalled(BOTH, "3 * 7", 21)
    assert figures.calculated_source("21", other) is None


def test_the_handler_cites_both_notes_under_a_total_of_two(monkeypatch):
    result, llama = ask(
        monkeypatch,
        ["message:\n总共要1828元。"],
        assistant=True,
        messages=totalled(BOTH, "500 + 240 + (128 * 6 + 320)", 1828),
    )
    message = result["choices"][0]["message"]
    assert message["content"] == "总共要1828元。\n\n来源：搜索实验、缓存改造"
    assert len(llama.grammars) == 1


# -- notes-sealed15's misses ---------------------------------------------------------

EXPERIMENT_COMES_TO = (
    "What figure does the search experiment's budget expression come to?"
)


def both_budgets_worked_out() -> list[dict[str, Any]]:
    """Both budget notes found for EXPERIMENT_COMES_TO, and both calculated."""
    return worked_out(
        searched(
            EXPERIMENT_COMES_TO, "search experiment budget 搜索实验预算", BUDGET_NOTES
        ),
        ("500 + 240", 740),
        ("128 * 6 + 320", 1088),
    )


def test_another_notes_figure_for_a_note_with_its_own_is_caught():
    """Both budget notes found by "search experiment budget 搜索实验预算", both
    calculated, and the answer gave the caching note's 1088 (3 of 3)."""
    turn = both_budgets_worked_out()
    wrong = "The search experiment's budget expression comes to 1088."
    misread = figures.figure_of_another_note(wrong, [], turn)
    assert misread is not None
    assert "asks about 搜索实验, whose figure is 500 + 240 = 740" in misread.note
    assert "The figures of 缓存改造 belong to those notes" in misread.note
    assert misread.plain == "The figure for 搜索实验 is 500 + 240 = 740."
    # The right figure, a call on the way, or an answer with no figure is let be.
    assert figures.figure_of_another_note("It comes to 740.", [], turn) is None
    right_and_more = "It comes to 740; the caching plan's is 1088."
    assert figures.figure_of_another_note(right_and_more, [], turn) is None
    assert (
        figures.figure_of_another_note(None, [calculate("128 * 6 + 320")], turn) is None
    )
    assert figures.figure_of_another_note("The note gives one.", [], turn) is None


def test_another_notes_figure_twice_gives_the_note_asked_abouts(monkeypatch):
    turn = both_budgets_worked_out()
    wrong = "message:\nIt comes to 1088."
    result, prompts = prompted(monkeypatch, [wrong, wrong], turn)
    content = result["choices"][0]["message"]["content"]
    assert content.startswith("The figure for 搜索实验 is 500 + 240 = 740.")
    assert "Answer with 搜索实验's figure" in prompts[-1].decode()


def test_plan_to_asks_for_no_calculation():
    """热点查询打算用什么来缓存？ ("what do they plan to cache hot queries with?"):
    打算 holds 算 (calculate), and the question had its budget calculated."""
    question = "热点查询打算用什么来缓存？"
    turn = searched(question, "热点查询", BUDGET_NOTES[1:])
    misread = figures.figure_not_asked(None, [calculate("128 * 6 + 320")], turn)
    assert misread is not None and "asks for no figure" in misread.note
    assert misread.plain.startswith("找到的笔记写道：缓存改造")
    # Asked to work it out, the calculator answers it.
    for asked in ("缓存改造的预算算出来是多少？", "帮我算一下缓存改造的预算"):
        costs = searched(asked, "缓存改造", BUDGET_NOTES[1:])
        assert (
            figures.figure_not_asked(None, [calculate("128 * 6 + 320")], costs) is None
        ), asked


def test_the_hints_advice_translated_is_an_echo():
    """The English hint said in Chinese shares no run of characters with it:
    "无法找到与“上线 launch”相关的任何笔记。请尝试使用其他单词…" (1 of 3)."""
    turn = searched("缓存改造什么时候上线？", "上线 launch", MISSED)
    translated = (
        "无法找到与“上线 launch”相关的任何笔记。请尝试使用其他单词（一个名称或术语"
        "最好；笔记可能用另一种语言写），或者告诉我笔记没有说。"
    )
    assert answering.echoed_hint(translated, turn)
    assert answering.echoed_hint("Please try different keywords.", turn)
    # Saying the notes do not say is the answer, not the hint.
    assert not answering.echoed_hint("笔记里没有提到缓存改造的上线日期。", turn)
    # Without a search that found nothing, such advice is no echo of a hint.
    found = searched("缓存改造什么时候上线？", "缓存改造", BUDGET_NOTES[1:])
    assert not answering.echoed_hint(translated, found)


def test_what_to_do_a_thing_with_asks_for_the_thing_the_notes_name():
    """热点查询打算用什么来缓存？ ("what will hot queries be cached with?") read 来缓存
    as the kind asked for, found no note naming one, and told the model so; it
    then echoed that (3 of 3 in notes-sealed15 on the session's final code). 来
    (and 去) before the verb only says what the thing is for: the kind is 缓存,
    which the caching note names."""
    question = "热点查询打算用什么来缓存？"
    turn = searched(question, "热点查询", BUDGET_NOTES[1:])
    assert unstated.thing_not_named("使用 Redis 缓存热点查询。", [], turn) is None
    # A kind that starts with 来 is still one (来源, a source).
    sourced = searched("日志系统的数据是什么来源？", "日志系统", [LOGGING])
    told = unstated.thing_not_named("文件轮转。", [], sourced)
    assert told is not None and "names a 来源" in told.note


def test_a_search_of_the_aim_alone_in_a_question_about_every_such_note_is_translated():
    """ "What do the two plans with budgets cost together?" searched "budgets",
    which found nothing; its subject words were taken instead, "plans
    together", translated 计划一起, which found nothing either (seen in the chat
    after start-up). Plans and "together" name no note: with no subject left,
    the aim itself is translated (预算, which every note with a budget holds)."""
    asked = "What do the two plans with budgets cost together?"
    miss = answering.missed_search(searched(asked, "budgets", NOTHING_MATCHED), TOOLS)
    assert miss == answering.Miss("search_notes", "query", "budgets", "zh", asked)
    # A subject named beside them is still taken.
    bill = answering.missed_search(searched(BILL, "bill", NOTHING_MATCHED), TOOLS)
    assert bill is not None and bill.words == "fund caching rework search experiment"
