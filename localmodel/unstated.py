"""Facts the notes found do not give: what the built-in model's handler does
when an answer gives one anyway.

Pure helpers over OpenAI chat messages, beside ``localmodel.figures`` (the
notes' figures and their arithmetic) and applied by ``localmodel.handler`` in
assistant mode:

- **A kind of fact no note gives.** A "how long", a "when is it due", a "who" or
  a "how many people" answered when no note found speaks of a span of time, a
  date, a person or a headcount is asked again with that said, and answered
  plainly if the model says it again (:data:`UNSTATED`).
- **A figure no note gives.** An answer asked for after a call made again that
  still gives a number nothing holds is asked again with the notes found said,
  and answered plainly if the model gives it again (:func:`invented_figure`).
- **A thing of a kind no note names** ("which database") is told to the model,
  and answered plainly if it answers the same way again where no note found
  could name one without the kind's word (:func:`thing_not_named`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from localmodel.answering import found_notes, listing, says_none
from localmodel.chatformat import (
    _HAN,
    _LATIN_WORD,
    _numbers,
    asker_language,
    last_user_text,
    made_up_numbers,
)
from localmodel.figures import Misread, _evaluate, _found_expressions, _spelled


@dataclass(frozen=True)
class _Kind:
    """A kind of fact a question may ask for that a note may not hold."""

    asks: re.Pattern[str]  # the question asks for it
    spoken: re.Pattern[str]  # a note speaks of it
    what: str  # what no note speaks of, for the model
    tell: str  # what the notes do not say ("how long")
    plain: Mapping[str, str]  # the plain answer, by the asker's language


#: How long something lasts or is kept, and a span of time as a note writes it.
_SPAN = _Kind(
    asks=re.compile(
        r"(?i)\bhow (?:many|much) (?:days|weeks|months|years|hours)\b|\bhow long\b|"
        r"多少天|几天|多久|多长时间|几个月|几周|几年"
    ),
    spoken=re.compile(
        r"(?i)\b(?:days?|weeks?|months?|years?|hours?)\b|天|日|周|星期|月|年|小时"
    ),
    what="a span of time: their figures are not days or any other span",
    tell="how long",
    plain={
        "zh": "笔记里没有提到时长：找到的笔记（{titles}）没有说多久。",
        "en": (
            "The notes do not say how long: the notes found ({titles}) give no "
            "span of time."
        ),
    },
)
#: When something is due or done (not "when" alone: 日志什么时候归档？ is
#: answered by 定时归档, a schedule), and a date as a note writes it.
_DATE = _Kind(
    asks=re.compile(
        r"(?i)\bwhen (?:is|are|was|will|does|do|should)\b[^?]*\b(?:due|finish|"
        r"finished|done|complete|completed|ready|launch|launched|ship|shipped|"
        r"deliver|delivered|start|started|end|ends|deadline)\b|\bdeadline\b|"
        r"\bdue date\b|\bby when\b|\bwhat date\b|\bwhich day\b|"
        r"截止|哪天|哪一天|几号|(?:什么时候|何时)(?:完成|结束|上线|交付|到期|开始|启动)"
    ),
    spoken=re.compile(
        r"(?i)\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.? \d|"
        r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|deadline|"
        r"due|quarter|q[1-4])\b|\d{4}-\d{1,2}|\d+\s*[年月日号]|截止|季度|"
        r"周[一二三四五六日]|星期[一二三四五六日天]|[上下本]个?月"
    ),
    what="a date or a deadline",
    tell="when",
    plain={
        "zh": "笔记里没有提到日期：找到的笔记（{titles}）没有说什么时候。",
        "en": (
            "The notes do not say when: the notes found ({titles}) give no date "
            "or deadline."
        ),
    },
)
#: Who owns or does something ("whose budget is larger" and 谁的 ask for a
#: note, not a person), and a person or team as a note names one.
_PERSON = _Kind(
    asks=re.compile(
        r"(?i)\bwho\b|\bwhom\b|\bwhich (?:team|person|people|engineer|group)\b|"
        r"谁(?!的)|哪个(?:团队|人|小组|部门)|负责人"
    ),
    spoken=re.compile(
        r"(?i)\b(?:owner|owned|owns|team|lead|leads|manager|engineer|assigned|"
        r"responsible)\b|@\w|负责|团队|小组|组长|经理|工程师|同事|部门"
    ),
    what="a person or a team",
    tell="who",
    plain={
        "zh": "笔记里没有提到负责人：找到的笔记（{titles}）没有说是谁。",
        "en": (
            "The notes do not say who: the notes found ({titles}) name no person "
            "or team."
        ),
    },
)


#: How many people do something, and a person, a team or a headcount as a note
#: writes one.
_HEADCOUNT = _Kind(
    asks=re.compile(
        r"(?i)\bhow many (?:people|persons|engineers|developers|members|staff|"
        r"employees|workers|teams)\b|\bheadcount\b|多少人|几个人|几名|几位|多少名|多少位"
    ),
    spoken=re.compile(_PERSON.spoken.pattern + r"|\bpeople\b|\bheadcount\b|人"),
    what="how many people: no person, team or headcount",
    tell="how many people",
    plain={
        "zh": "笔记里没有提到人数：找到的笔记（{titles}）没有说有多少人。",
        "en": (
            "The notes do not say how many people: the notes found ({titles}) "
            "name no person, team or headcount."
        ),
    },
)


def _not_given(
    kind: _Kind,
    content: str | None,
    calls: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
) -> Misread | None:
    """What to tell the model when the question asks for a fact of ``kind``,
    no note this turn found speaks of any, and the answer gives one anyway (a
    figure, or anything that does not say the notes do not). None otherwise."""
    if calls or not content:
        return None
    if not kind.asks.search(last_user_text(messages)):
        return None
    if says_none(content) and not _numbers(content):
        return None
    notes = found_notes(messages)
    if not notes or any(kind.spoken.search(f"{t} {text}") for t, text in notes.items()):
        return None
    return Misread(
        note=(
            f"No note found speaks of {kind.what} ({listing(notes)}). Tell the "
            f"user the notes do not say {kind.tell}."
        ),
        plain=kind.plain[asker_language(messages)].format(titles="、".join(notes)),
    )


def span_not_given(
    content: str | None,
    calls: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
) -> Misread | None:
    """A "how long" answered when no note found speaks of a span of time: "How
    many days of data does the search experiment keep?" was answered "740
    days" (its budget), and 缓存改造打算保留多少天的数据？ "128天" (a factor of
    its budget)."""
    return _not_given(_SPAN, content, calls, messages)


def date_not_given(
    content: str | None,
    calls: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
) -> Misread | None:
    """A "when is it due" answered when no note found gives a date: "When is the
    caching rework due to be finished?" was answered "in 1088 days" (its
    budget, 3 of 3)."""
    return _not_given(_DATE, content, calls, messages)


def person_not_given(
    content: str | None,
    calls: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
) -> Misread | None:
    """A "who" answered when no note found names a person or team: 搜索实验由谁
    负责？ was answered 实验由比较倒排索引与向量检索的团队负责 (3 of 3)."""
    return _not_given(_PERSON, content, calls, messages)


def headcount_not_given(
    content: str | None,
    calls: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
) -> Misread | None:
    """A "how many people" answered when no note found names a person, a team
    or a headcount: "How many engineers are working on the search experiment?"
    was answered "There are 740 engineers" (its budget, 3 of 3)."""
    return _not_given(_HEADCOUNT, content, calls, messages)


#: The rules above, in the order the handler applies them.
UNSTATED = (span_not_given, date_not_given, person_not_given, headcount_not_given)


#: Chinese numerals as a note writes them (七天, 十二个月, 两周), and their values.
_HAN_DIGITS = {
    "零": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_HAN_UNITS = {"十": 10, "百": 100, "千": 1000}
#: A Chinese numeral, and the time it counts when a unit follows it (七天).
_HAN_COUNTED = re.compile(
    r"([零一二两三四五六七八九十百千]+)(个月|小时|分钟|星期|天|日|周|月|年)?"
)
_DAYS = ("day", "天", "日")
_WEEKS = ("week", "周", "星期", "个星期")
_MONTHS = ("month", "月", "个月")
#: The words an answer may count each unit in.
_COUNTED_IN = {
    "天": _DAYS,
    "日": _DAYS,
    "周": _WEEKS,
    "星期": _WEEKS,
    "月": _MONTHS,
    "个月": _MONTHS,
    "年": ("year", "年"),
    "小时": ("hour", "小时", "个小时"),
    "分钟": ("minute", "分钟"),
}


def _han_value(numeral: str) -> int:
    """The value of a Chinese numeral of digits and 十 百 千 (七, 十二, 三百五十)."""
    total = digit = 0
    for char in numeral:
        if char in _HAN_UNITS:
            total += (digit or 1) * _HAN_UNITS[char]
            digit = 0
        else:
            digit = digit * 10 + _HAN_DIGITS[char] if digit else _HAN_DIGITS[char]
    return total + digit


def _counted_as(number: str, units: tuple[str, ...], content: str) -> bool:
    """True when, wherever the answer gives ``number``, the word after it (if
    any) is one of ``units``: 七天 is "7 days", not "7 gigabytes"."""
    given = re.compile(
        rf"(?<![\d.,]){re.escape(number)}(?![\d]|[.,]\d)\s*([A-Za-z]+|[\u4e00-\u9fff]+)?"
    )
    for match in given.finditer(content):
        word = (match.group(1) or "").lower()
        if word and not word.startswith(units):
            return False
    return True


def _worked_out(messages: Sequence[Mapping[str, Any]], content: str) -> set[str]:
    """What ``content`` may state beside the figures written out: the notes'
    Chinese numerals as digits, in the unit they count ("7 days" for 七天, not
    "7 gigabytes", 1 of 4 for "how many gigabytes" on 5415b55), each
    expression's value, and the sum and difference of every two (a total worked
    out in the head is the calculation rules' business, not a made-up figure)."""
    known = {
        str(_han_value(numeral))
        for text in found_notes(messages).values()
        for numeral, unit in _HAN_COUNTED.findall(text)
        if not unit or _counted_as(str(_han_value(numeral)), _COUNTED_IN[unit], content)
    }
    values = [
        v
        for v in (_evaluate(e) for e in _found_expressions(messages).values())
        if v is not None
    ]
    for value in values:
        known |= _spelled(value)
    for i, first in enumerate(values):
        for second in values[i + 1 :]:
            for value in (first + second, abs(first - second)):
                known |= _spelled(value)
    if values:
        known |= _spelled(sum(values))
    return known


_FIGURE_NOT_FOUND = {
    "zh": "笔记里没有这个数字：找到的笔记（{titles}）没有给出。",
    "en": "The notes do not give that figure: the notes found ({titles}) do not say.",
}


def invented_figure(
    content: str | None,
    calls: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
) -> Misread | None:
    """What to tell the model when an answer gives a figure that no note found,
    no tool result and no word of the user holds, nor any sum or difference of
    the notes' figures: "How many gigabytes of logs does the logging system
    store?" was answered "approximately 10 gigabytes" (3 of 3), after the
    made-up-number check had asked for a call and the model had made a search
    again. None when nothing was found (the rule for searches that all missed
    answers that) or every number is accounted for."""
    if calls or not content:
        return None
    notes = found_notes(messages)
    if not notes:
        return None
    invented = sorted(
        set(made_up_numbers(content, messages)) - _worked_out(messages, content)
    )
    if not invented:
        return None
    return Misread(
        note=(
            f"No note found gives {', '.join(invented)} ({listing(notes)}). Answer "
            "only with what these notes say; if they do not give what the question "
            "asks, tell the user the notes do not say."
        ),
        plain=_FIGURE_NOT_FOUND[asker_language(messages)].format(
            titles="、".join(notes)
        ),
    )


#: "Which database …", 用的是哪个数据库？: the thing asked for, to be looked for
#: in the notes found (a Chinese one only at the question's end, where the word
#: ends; an English one after "which" or "what"). 来 or 去 before a verb says
#: what the thing is for (用什么来缓存, "what to cache with"): the kind is 缓存.
_WHICH_ZH = re.compile(
    r"(?:哪个|哪种|哪一个|哪一种|哪款|哪家|什么)[来去]?([\u4e00-\u9fff]{2,4})[？?。！!\s]*$"
)
_WHICH_EN = re.compile(r"(?i)\b(?:which|what)\s+([a-z]{4,})\b")
#: What the question may ask for that a note answers without naming it: the note
#: itself, a plan, a time or a person (their own rules), a kind of thing.
_NOT_A_THING = frozenset(
    {"笔记", "方案", "项目", "计划", "文档", "记录", "时候", "时间", "日期", "团队"}
    | {"东西", "内容", "意思", "作用", "用途", "情况", "问题", "工具", "技术", "方法"}
    | {"方式", "办法", "系统", "数据", "预算", "费用"}
    | {"note", "notes", "plan", "plans", "project", "projects", "thing", "things"}
    | {"kind", "sort", "type", "tool", "tools", "does", "will", "would", "should"}
    | {"could", "were", "have", "about", "time", "team", "budget", "cost"}
)


#: The plain answer when no note found names a thing of the kind asked for.
_KIND_NOT_NAMED = {
    "zh": "笔记没有说是哪个{kind}。找到的笔记写道：{listing}",
    "en": "The notes do not say which {kind}. The notes found say: {listing}",
}


def _latin_note(text: str) -> bool:
    """True when a note is written in a Latin script (more letters than Chinese
    characters): only there can an English word be looked for."""
    return len("".join(_LATIN_WORD.findall(text))) > len(_HAN.findall(text))


def thing_not_named(
    content: str | None,
    calls: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
) -> Misread | None:
    """What to tell the model when the question asks which thing of a kind
    (a database, a language) and no note found names that kind, in a note of
    the question's script, and the answer does not say the notes do not:
    日志系统用的是哪个数据库？ was answered with the logging note's words about
    rotating files (3 of 3, and 3 of 3 again after being told). The plain answer
    says the notes do not say which and quotes them, only where no note found
    holds a name in Latin letters (a Chinese note may name a thing of that kind
    without the kind's word: Redis, for a database), and never over English
    notes, whose names look like any other word."""
    if calls or not content or says_none(content):
        return None
    question = last_user_text(messages)
    notes = found_notes(messages)
    if not notes:
        return None
    match = _WHICH_ZH.search(question)
    if match is not None:
        kind = match.group(1)
        texts = [f"{t} {x}" for t, x in notes.items()]
        sure = not any(_LATIN_WORD.search(text) for text in texts)
    else:
        match = _WHICH_EN.search(question)
        if match is None:
            return None
        kind = match.group(1).lower().removesuffix("s")
        texts = [f"{t} {x}".lower() for t, x in notes.items() if _latin_note(x)]
        if len(texts) != len(notes):
            return None
        sure = False
    if kind in _NOT_A_THING or any(kind in text for text in texts):
        return None
    found = listing(notes)
    return Misread(
        note=(
            f"No note found names a {kind} ({found}). If they do not say which "
            f"{kind}, tell the user the notes do not say."
        ),
        plain=(
            _KIND_NOT_NAMED[asker_language(messages)].format(kind=kind, listing=found)
            if sure
            else None
        ),
    )
