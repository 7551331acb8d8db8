"""search_notes matches words, Chinese included, and ranks what it finds."""

from __future__ import annotations

import pytest

from effects.builtins import search_notes
from effects.models import Note
from effects.search import rank, terms
from engine.execution import ToolError

pytestmark = pytest.mark.django_db(transaction=True)


def test_chinese_runs_become_the_run_and_its_bigrams_latin_words_stay_whole():
    assert terms("实验这个方案") == [
        "实验这个方案",
        "实验",
        "验这",
        "这个",
        "个方",
        "方案",
    ]
    assert terms("Redis, cache! 预算") == ["redis", "cache", "预算"]
    assert terms("  ，。 ") == []
    # A lone Latin letter matches nearly every note ("s" in "Redis"): no term.
    assert terms("the search experiment's budget") == [
        "the",
        "search",
        "experiment",
        "budget",
    ]
    assert terms("plan B 7 天") == ["plan", "7", "天"]
    many = "".join(chr(0x4E00 + i) for i in range(500))
    assert len(terms(many)) == 24  # bounded work for any query


def test_more_terms_rank_higher_and_a_title_counts_more_than_content():
    notes = [
        ("周报", "Redis 出现在正文里"),
        ("Redis 缓存", "热点查询"),
        ("无关", "没有这个词"),
        ("Redis 预算", "预算表达式"),
    ]
    assert rank(terms("Redis 预算"), notes) == [3, 1, 0]


def test_closer_terms_rank_first_among_equals():
    notes = [("a", "redis " + "x" * 200 + " budget"), ("b", "redis budget")]
    assert rank(terms("redis budget"), notes) == [1, 0]


def call(keyword):
    return search_notes({"keyword": keyword}, None)


def test_a_phrase_finds_the_note_its_words_name(demo):
    found = call("实验这个方案")
    assert found[0]["title"] == "搜索实验"
    assert all(set(note) == {"title", "content"} for note in found)
    assert call("日志系统保留多少天")[0]["title"] == "日志系统"
    assert call("redis")[0]["title"] == "缓存改造"


def test_nothing_found_says_so_with_a_hint(demo):
    with pytest.raises(
        ToolError, match="Nothing matched: no note mentions any word of .*other words"
    ):
        call("Kafka")


def test_the_newest_of_equally_good_notes_comes_first(demo):
    Note.objects.create(title="旧 Redis", content="x")
    Note.objects.create(title="新 Redis", content="x")
    titles = [n["title"] for n in call("Redis")]
    assert titles.index("新 Redis") < titles.index("旧 Redis")
