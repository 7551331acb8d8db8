"""Ranked full-text search of memory: English and Chinese, live items only.

Marked ``dbsensitive``: the PostgreSQL pass (``make test-postgres``) runs them
against its own full-text index, as the SQLite pass does against FTS5.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from memory.models import MemoryItem
from memory.services import (
    history_of,
    memory_recall,
    memory_search,
    memory_update,
)
from tests.support.memory import remembered
from tests.support.waiting import in_threads

pytestmark = [pytest.mark.django_db, pytest.mark.dbsensitive]


def subjects(items):
    return [item.subject for item in items]


@pytest.fixture
def facts(alice):
    return {
        "tea": remembered(alice, "用户喜欢喝绿茶，不加糖。", subject="饮品"),
        "cache": remembered(
            alice, "项目使用 Redis 缓存热点查询，缓存过期时间为十分钟。", "缓存方案"
        ),
        "lang": remembered(alice, "Answer in English, briefly.", "answer language"),
        "editor": remembered(alice, "Uses vim with a dark theme.", "editor"),
        "log": remembered(alice, "日志保留最近七天。", "日志"),
    }


def test_a_chinese_query_ranks_the_item_that_holds_its_words_first(alice, facts):
    found = memory_recall(user=alice, agent=None, query="缓存过期多久？")
    assert subjects(found)[0] == "缓存方案"
    found = memory_recall(user=alice, agent=None, query="我喜欢喝什么茶")
    assert subjects(found)[0] == "饮品"


def test_an_english_query_ranks_by_its_words_and_the_subject_weighs_more(alice, facts):
    found = memory_recall(user=alice, agent=None, query="which language to answer in")
    assert subjects(found)[0] == "answer language"
    found = memory_recall(user=alice, agent=None, query="Redis")
    assert subjects(found) == ["缓存方案"]
    assert memory_recall(user=alice, agent=None, query="kubernetes") == []


def test_a_query_mixing_english_and_chinese_finds_both_kinds_of_item(alice, facts):
    found = subjects(memory_recall(user=alice, agent=None, query="vim 日志"))
    assert set(found[:2]) == {"editor", "日志"}


def test_more_matching_terms_rank_higher_than_one(alice):
    remembered(alice, "The deploy runs on Fridays.", "deploy day")
    remembered(alice, "The deploy of the cache service runs on Fridays at noon.")
    found = memory_recall(user=alice, agent=None, query="cache deploy noon")
    assert found[0].text.startswith("The deploy of the cache")


def test_expired_superseded_and_forgotten_items_never_come_back(alice, facts):
    remembered(alice, "Answer in French now.", "Answer Language")
    memory_update(
        item=facts["tea"],
        actor=alice,
        expires_at=timezone.now() - timedelta(seconds=1),
    )
    found = memory_recall(user=alice, agent=None, query="answer language 绿茶")
    assert [item.text for item in found] == ["Answer in French now."]
    # The history is still searchable where people look for it.
    everything = memory_search(
        query="answer language",
        user=alice,
        statuses=MemoryItem.Status.values,
        live_only=False,
    )
    assert {item.text for item in everything} == {
        "Answer in French now.",
        "Answer in English, briefly.",
    }


def test_a_search_reads_the_callers_items_only(alice, bob, facts):
    remembered(bob, "Bob drinks green tea, 绿茶.", "饮品")
    assert [i.user for i in memory_recall(user=alice, agent=None, query="绿茶")] == [
        alice
    ]
    assert [i.user for i in memory_recall(user=bob, agent=None, query="绿茶")] == [bob]


def test_an_edit_reindexes_the_item_and_a_deletion_drops_it(alice, facts):
    memory_update(item=facts["editor"], actor=alice, text="Uses emacs now.")
    assert memory_recall(user=alice, agent=None, query="vim") == []
    assert subjects(memory_recall(user=alice, agent=None, query="emacs")) == ["editor"]
    facts["editor"].delete()
    assert memory_recall(user=alice, agent=None, query="emacs") == []


def test_queries_that_are_search_syntax_are_taken_as_words(alice, facts):
    for query in ['"', "NEAR(a b)", "redis OR", "a:b*", "'; DROP", "\x00", "&|!()"]:
        memory_recall(user=alice, agent=None, query=query)
    found = memory_recall(user=alice, agent=None, query='Redis" OR "x')
    assert subjects(found) == ["缓存方案"]


@pytest.mark.django_db(transaction=True)
def test_writes_on_one_subject_at_once_leave_one_live_item_and_one_history(alice):
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def write(number: int) -> None:
        try:
            barrier.wait(timeout=10)
            remembered(alice, f"Fact number {number}.", "same subject")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    in_threads(write, 6, timeout=60)
    assert not errors, errors
    [live] = MemoryItem.objects.filter(status=MemoryItem.Status.LIVE)
    older = history_of(live)
    assert len(older) == 5
    assert {i.status for i in older} == {MemoryItem.Status.SUPERSEDED}
    assert MemoryItem.objects.count() == 6
