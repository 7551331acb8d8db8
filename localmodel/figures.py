"""The figures of the notes found: what the built-in model's handler does when
an answer's arithmetic over them goes wrong.

Pure helpers over OpenAI chat messages, beside ``localmodel.answering`` (the
searches) and applied by ``localmodel.handler`` in assistant mode:

- **An expression quoted, not computed.** An answer that holds ``500 + 240``
  and not its value is sent back for a ``calculate`` call:
  :func:`uncomputed_expression`.
- **A sum over several notes is one calculation** (:func:`uncombined_calculation`),
  and a sum of two named things of which one was searched searches the other
  first (:func:`unsearched_second_note`).
- **A difference of two notes' figures is worked out** when the answer does not
  state it (:func:`uncomputed_difference`).
- **A figure belongs to its note.** Another note's figure given for the note
  asked about, which has none, is asked again as the answer with that said
  (:func:`figure_of_another_note`).
- **A figure the question does not ask for** is not the answer: a calculation
  for a question that asks for none is asked again as the answer
  (:func:`figure_not_asked`).
- **A total names every note it adds up** (:func:`calculated_source`).

The facts no note gives (a span, a date, a person, a made-up figure) are
``localmodel.unstated``'s.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from localmodel.answering import (
    _calls_by_id,
    _found_nothing,
    _is_search,
    _known_numbers,
    _result,
    _search_answered,
    _search_tool,
    _strings,
    found_notes,
    listing,
    says_none,
)
from localmodel.chatformat import (
    _HAN,
    _RESULT_ROLES,
    _bigrams,
    _numbers,
    _this_turn,
    asker_language,
    cite,
    last_user_text,
)

# Numbers joined by + * / × ÷ (or a minus with spaces around it: not a date).
_EXPRESSION = re.compile(
    r"\(?\s*\d+(?:\.\d+)?\s*\)?"
    r"(?:(?:\s*[+*/×÷]\s*|\s+-\s+)\(?\s*\d+(?:\.\d+)?\s*\)?)+"
)
_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _value(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return float(_OPERATORS[type(node.op)](_value(node.left), _value(node.right)))
    raise ValueError("not plain arithmetic")


def _evaluate(expression: str) -> float | None:
    text = expression.replace("×", "*").replace("÷", "/")
    if text.count("(") != text.count(")"):
        text = text.replace("(", "").replace(")", "")
    try:
        return _value(ast.parse(text.strip(), mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None


def _spelled(value: float) -> set[str]:
    whole = round(value)
    if abs(value - whole) < 1e-9:
        return {str(whole), f"{whole:,}"}
    return {f"{value:.2f}".rstrip("0").rstrip("."), f"{value:.1f}", str(value)}


#: A question that adds up several notes' figures. A difference is left to the
#: model's own steps: asked for "one calculation over all of them", it added the
#: two budgets of "by how much does … exceed …" (0 of 3; it had subtracted them
#: step by step before).
_COMBINES = re.compile(
    r"(?i)\b(?:combined|together|altogether|add|adding|added|plus|sum|both)\b|"
    r"加|合计|总共|一共|相加|合起来|两个|两项"
)
#: A question that asks how far apart two figures are.
_DIFFERS = re.compile(
    r"(?i)\b(?:difference|differ|gap|exceeds?|cheaper|costlier|more expensive)\b|"
    r"how much (?:more|less)|\bby how much\b|\b(?:costs?|spends?) (?:more|less)\b|"
    r"相差|差额|差距|差多少|多多少|少多少|贵多少|便宜多少|"
    # 缓存改造比搜索实验多花多少钱？
    r"比[^，。,.?？]{1,16}?(?:多|少|贵|便宜)"
)
#: A question that names two things ("the caching rework and the search
#: experiment", 缓存改造和搜索实验, both plans, "which costs more, … or …").
_NAMES_TWO = re.compile(
    r"(?i)\b(?:and|both|than|or)\b|\badd\b[^.?!]*\bto\b|[和与跟及、比]|两个|两项"
)
#: "In total", "the total of": a sum when the question names two things ("What
#: do the caching rework and the search experiment cost in total?"), but not
#: for one ("What does the caching plan cost in total?", "compute the total").
_TOTAL = re.compile(r"(?i)\bin total\b|\btotal of\b|总计")


def _adds_up(question: str) -> bool:
    """True when ``question`` adds up several notes' figures."""
    return bool(
        _COMBINES.search(question)
        or (_TOTAL.search(question) and _NAMES_TWO.search(question))
    )


def _found_expressions(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The first expression of each note this turn's searches found, by title."""
    found: dict[str, str] = {}
    for title, text in found_notes(messages).items():
        match = _EXPRESSION.search(text)
        if match and _evaluate(match.group()) is not None:
            found[title] = match.group().strip()
    return found


def _written(call: Mapping[str, Any]) -> str:
    """The string arguments of a call, as one text."""
    return " ".join(_strings((call.get("function") or {}).get("arguments")))


def _plain(expression: str) -> str:
    return re.sub(r"\s+", "", expression)


def uncombined_calculation(
    calls: Sequence[Mapping[str, Any]], messages: Sequence[Mapping[str, Any]]
) -> str | None:
    """The note to ask again with when the question adds up several notes'
    figures, this turn found two or more notes with an expression, and a
    ``calculate`` call works out one note's alone (neither its expression nor
    its value holds another's). The model had worked out the inverted-index
    experiment's 500 + 240 and answered it as the combined budget of both
    plans. None otherwise."""
    if not _adds_up(last_user_text(messages)):
        return None
    notes = _found_expressions(messages)
    if len(notes) < 2:
        return None
    for call in calls:
        function = call.get("function") or {}
        if function.get("name") != "calculate":
            continue
        written = _written(call)
        plain = _plain(written)
        covered = [
            title
            for title, expression in notes.items()
            if _plain(expression) in plain
            or _spelled(_evaluate(expression) or 0.0) & _numbers(written)
        ]
        if len(covered) == 1:
            return _add_them_up(notes)
    return None


def _add_them_up(notes: Mapping[str, str]) -> str:
    return (
        "The question adds up the figures of several notes found: "
        f"{listing(notes)}. Add them all up in one calculate call."
    )


def unstated_total(
    content: str | None,
    calls: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
) -> str | None:
    """The note to ask for the calculation with when the question adds up
    several notes' figures, this turn found two or more notes with an
    expression, and a text answer does not state the total of all of them:
    asked what the search experiment and the Redis caching plan cost together,
    with both notes found, the model answered "500 + 128 * 6 + 320 = 4720"
    without a call (3 of 3). None otherwise."""
    if calls or not content or not _adds_up(last_user_text(messages)):
        return None
    notes = _found_expressions(messages)
    if len(notes) < 2:
        return None
    total = sum(_evaluate(expression) or 0.0 for expression in notes.values())
    if _spelled(total) & _numbers(content):
        return None
    return _add_them_up(notes)


def _one_search_found(messages: Sequence[Mapping[str, Any]]) -> bool:
    """True when one search of this turn found something, and it is the turn's
    last search (the ones before it found nothing: a missed search and its
    translation are one search to the user)."""
    turn = _this_turn(messages)
    calls = _calls_by_id(turn)
    found = [
        _found_nothing(_result(message)) is None
        for message in turn
        if message.get("role") in _RESULT_ROLES
        and _search_answered(message, calls) is not None
    ]
    return sum(found) == 1 and found[-1]


def unsearched_second_note(
    calls: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
) -> tuple[str, str] | None:
    """The search tool to call, and what to tell the model, when the question
    adds up the figures of two things it names, the turn's one search that
    found something (after any that found nothing, such as a search and its
    translation) found one note with an expression, and the model goes to
    ``calculate``: it had searched "search experiment budget", worked out
    500 + 240 and answered 740 for "Add together the budgets of the caching
    rework and the search experiment". Asked once: after another search the
    notes found are what there is (the other may give no figure). None
    otherwise."""
    question = last_user_text(messages)
    combines = _adds_up(question) or _DIFFERS.search(question)
    if not (combines and _NAMES_TWO.search(question)):
        return None
    if not any((c.get("function") or {}).get("name") == "calculate" for c in calls):
        return None
    notes = _found_expressions(messages)
    if len(notes) != 1 or not _one_search_found(messages):
        return None
    search = _search_tool(tools)
    if search is None:
        return None
    ((title, expression),) = notes.items()
    return search, (
        "The question combines the figures of two things it names, and the search "
        f"so far found one note with a figure ({title}: {expression}). Search "
        "the notes for the other one the question names before calculating."
    )


#: A question that asks for a figure: a budget, a cost, a price.
_ASKS_FIGURE = re.compile(
    r"(?i)\b(?:budget|budgets|cost|costs|price|spend|spent)\b|how much|"
    r"预算|多少钱|花费|费用|成本|花多少"
)


def _han_pairs(text: str) -> set[str]:
    """The pairs of Chinese characters side by side in ``text``."""
    return {pair for pair in _bigrams(text) if all(map(_HAN.fullmatch, pair))}


@dataclass(frozen=True)
class Misread:
    """A reply that gives the notes a figure they do not hold: what to tell the
    model, and the plain answer to give if, told, it answers the same way (the
    model had answered with the same budget after being told, 3 of 3). No plain
    answer where the rule cannot be sure of it: the told answer then stands."""

    note: str
    plain: str | None


def figure_of_another_note(
    content: str | None,
    calls: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
) -> Misread | None:
    """What to tell the model when the question asks for the figure of one
    note it names (the only note found whose title shares a pair of Chinese
    characters with the question), that note gives none, and the reply uses
    another note's expression or its value: asked 日志方案花多少钱？, the model
    had found 日志系统 (which gives no budget) beside the two budget notes, and
    answered with the search experiment's 500 + 240. So does an answer that
    does not say the note gives none ("日志系统的预算是文件轮转和定时归档…").
    When the question shares no title's characters, the one note found, if
    only one was, is the one asked about. Not
    for a sum (the one-calculation rule's), nor when the note asked about has
    its own figure. None otherwise."""
    question = last_user_text(messages)
    if not _ASKS_FIGURE.search(question) or _adds_up(question):
        return None
    notes = found_notes(messages)
    asked = [title for title in notes if _han_pairs(title) & _han_pairs(question)]
    if not asked and len(notes) == 1:
        # An English question names no note's Chinese title: the one note its
        # searches found is the one asked about ("How much will the logging
        # system cost?" found 日志系统 alone, and was answered "$10,000 per
        # year", 3 of 3).
        asked = list(notes)
    if not asked:
        # Nor when the turn's searches name one note found: "What is the
        # logging system's budget?" searched "logging system budget 日志系统预算",
        # which found all three notes and names 日志系统 alone, and was answered
        # "740 units" (the search experiment's, 3 of 3).
        said = _searched_words(messages)
        asked = [title for title in notes if title in said]
    if len(asked) != 1:
        return None
    subject = asked[0]
    figures = _found_expressions(messages)
    if subject in figures:
        return _other_notes_figure(subject, content, calls, figures, notes, messages)
    written = " ".join(
        [
            content or "",
            *(_written(call) for call in calls),
        ]
    )
    used = [
        title
        for title, expression in figures.items()
        if _plain(expression) in _plain(written)
        or _spelled(_evaluate(expression) or 0.0) & _numbers(written)
    ]
    answered_as_if = not calls and bool(content) and not says_none(content or "")
    if not used and not answered_as_if:
        return None
    others = (
        f"The figures of {', '.join(used)} belong to those notes, not to {subject}. "
        if used
        else ""
    )
    return Misread(
        note=(
            f"The question asks about {subject}, and that note gives no such "
            f"figure: {subject}: {notes[subject]} {others}Tell the user that "
            f"{subject} gives none."
        ),
        plain=_NO_SUCH_FIGURE[asker_language(messages)].format(subject=subject),
    )


def _other_notes_figure(
    subject: str,
    content: str | None,
    calls: Sequence[Mapping[str, Any]],
    figures: Mapping[str, str],
    notes: Mapping[str, str],
    messages: Sequence[Mapping[str, Any]],
) -> Misread | None:
    """What to tell the model when the note asked about has its own figure and
    the answer gives another note's instead: "What figure does the search
    experiment's budget expression come to?" found both budget notes, had both
    calculated and was answered "1088" (缓存改造's), 3 of 3 in notes-sealed15.
    Only for an answer (a call may well work out another note's figure), and
    only when it does not state the figure of the note asked about."""
    if calls or not content:
        return None
    value = _evaluate(figures[subject])
    stated = _numbers(content)
    if value is None or _spelled(value) & stated:
        return None
    used = [
        title
        for title, expression in figures.items()
        if title != subject
        and (
            _plain(expression) in _plain(content)
            or _spelled(_evaluate(expression) or 0.0) & stated
        )
    ]
    if not used:
        return None
    figure = f"{figures[subject]} = {_shown(value)}"
    return Misread(
        note=(
            f"The question asks about {subject}, whose figure is {figure}: "
            f"{subject}: {notes[subject]} The figures of {', '.join(used)} belong "
            f"to those notes, not to {subject}. Answer with {subject}'s figure."
        ),
        plain=_OWN_FIGURE[asker_language(messages)].format(
            subject=subject, figure=figure
        ),
    )


def _searched_words(messages: Sequence[Mapping[str, Any]]) -> str:
    """The words of this turn's search calls, one string."""
    return " ".join(
        " ".join(_strings(call.get("arguments")))
        for call in _calls_by_id(_this_turn(messages)).values()
        if _is_search(str(call.get("name") or ""))
    )


#: A question that asks for a figure (or for a span, a date or a person, which
#: the rules below look after): the calculator may well answer it. 打算 ("plan
#: to") asks for none: 热点查询打算用什么来缓存？ had its budget calculated and was
#: answered that no note was found (3 of 3 in notes-sealed15).
_ASKS_NUMBER = re.compile(
    r"(?i)\b(?:budgets?|costs?|prices?|spend|spent|total|sum|amount|worth|bill|"
    r"money|pay|expression|figures?|numbers?|calculat\w*|comput\w*|work out|add|"
    r"plus|minus|difference|gap|cheaper|costlier|exceeds?|more|less|larger|"
    r"largest|bigger|biggest|smaller|higher|highest|lower|lowest|most|least|much|"
    r"many|long|when|who|whom)\b|"
    r"多少|几|预算|花|钱|(?<!打)算|总|加|减|差|贵|便宜|费|价|成本|大|小|高|低|最|多久|多长|时候|"
    r"何时|谁|\d"
)

_NOTES_SAY = {
    "zh": "找到的笔记写道：{listing}",
    "en": "The notes found say: {listing}",
}


def _calculations(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, float]]:
    """This turn's ``calculate`` calls that gave a figure: what each was asked
    (its arguments, as one text) and the figure."""
    turn = _this_turn(messages)
    calls = _calls_by_id(turn)
    done: list[tuple[str, float]] = []
    for message in turn:
        if message.get("role") not in _RESULT_ROLES:
            continue
        call = calls.get(str(message.get("tool_call_id") or ""))
        value = _result(message)
        if (
            call is not None
            and call.get("name") == "calculate"
            and isinstance(value, dict)
            and isinstance(value.get("result"), int | float)
        ):
            asked = " ".join(_strings(call.get("arguments")))
            done.append((asked, float(value["result"])))
    return done


def _calculated(messages: Sequence[Mapping[str, Any]]) -> set[str]:
    """The results of this turn's ``calculate`` calls, as an answer writes them."""
    values: set[str] = set()
    for _, result in _calculations(messages):
        values |= _spelled(result)
    return values


def calculated_source(
    content: str | None, messages: Sequence[Mapping[str, Any]]
) -> str | None:
    """The line naming every note whose figures the calculation an answer gives
    used, when the answer names none of the notes found. "总共要1828元。" after
    ``500 + 240 + (128 * 6 + 320)`` had been cited as 缓存改造 alone (the
    character pairs its digits share with that note). A note is used when its
    expression, or that expression's value, is written in the call. None when no
    calculation of this turn gave a figure the answer states."""
    if not content:
        return None
    expressions = _found_expressions(messages)
    if not expressions or any(title in content for title in found_notes(messages)):
        return None
    stated = _numbers(content)
    values = {title: _evaluate(expression) for title, expression in expressions.items()}
    used: list[str] = []
    for written, result in _calculations(messages):
        if not _spelled(result) & stated:
            continue
        for title, expression in expressions.items():
            total = values[title]
            by_value = total is not None and _spelled(total) & _numbers(written)
            if title not in used and (
                _plain(expression) in _plain(written) or by_value
            ):
                used.append(title)
    return cite(used, messages) if used else None


def figure_not_asked(
    content: str | None,
    calls: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
) -> Misread | None:
    """What to tell the model when the question asks for no figure (nor a span,
    a date or a person) and the reply calculates one, or answers with a result
    of the calculator, or with a note's expression: "What does the team plan to
    put in Redis?" found the caching note, calculated its budget and was
    answered "The team plans to put 1088 in Redis" (3 of 3), and, told, "The
    team plans to put 128 * 6 + 320 in Redis". Answered with what the notes
    found say if it does so again. None otherwise."""
    if _ASKS_NUMBER.search(last_user_text(messages)):
        return None
    notes = found_notes(messages)
    if not notes:
        return None
    calculating = any(
        (c.get("function") or {}).get("name") == "calculate" for c in calls
    )
    if not calculating and (calls or not content):
        return None
    quoted = any(
        _plain(expression) in _plain(content or "")
        for expression in _found_expressions(messages).values()
    )
    if (
        not calculating
        and not quoted
        and not _calculated(messages) & _numbers(content or "")
    ):
        return None
    found = listing(notes)
    return Misread(
        note=(
            "The question asks for no figure: it asks what the notes say. The notes "
            f"found: {found} Answer the user's question from them in a sentence, "
            "with no calculation."
        ),
        plain=_NOTES_SAY[asker_language(messages)].format(listing=found),
    )


_NO_SUCH_FIGURE = {
    "zh": "笔记里没有{subject}的这项数字：{subject}这条笔记没有给出。",
    "en": "The notes give no such figure for {subject}: that note does not say.",
}


#: The plain answer with the figure of the note asked about.
_OWN_FIGURE = {
    "zh": "{subject}的数字是 {figure}。",
    "en": "The figure for {subject} is {figure}.",
}


def _shown(value: float) -> str:
    whole = round(value)
    return str(whole) if abs(value - whole) < 1e-9 else f"{value:g}"


def uncomputed_difference(
    content: str | None,
    calls: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
) -> str | None:
    """What to ask the model when the question asks how far apart two notes'
    figures are, this turn found exactly those two, and the reply does not work
    out their difference: an answer that does not state it (it had worked out
    both budgets, 1088 and 740, for "What is the gap between the caching
    rework's budget and the search experiment's budget?" and answered 740), or,
    once both figures are worked out, a calculation of something else (asked
    缓存改造比搜索实验多花多少钱？, it went on with 740 + 1088, 1828 - 500, … for
    ten calls). The larger less the smaller, as "gap", "cheaper" and "exceed"
    all ask. None otherwise."""
    question = last_user_text(messages)
    if not _DIFFERS.search(question) or _adds_up(question):
        return None
    figures = _found_expressions(messages)  # each evaluates (it was kept so)
    if len(figures) != 2:
        return None
    (high, top), (low, bottom) = sorted(
        (
            (title, _evaluate(expression) or 0.0)
            for title, expression in figures.items()
        ),
        key=lambda pair: -pair[1],
    )
    gap = top - bottom
    if calls:
        known = _known_numbers(messages)
        if not (_spelled(top) & known and _spelled(bottom) & known):
            return None  # not both worked out yet: the model is on its way
        values = [
            _evaluate(_written(call))
            for call in calls
            if (call.get("function") or {}).get("name") == "calculate"
        ]
        if not values or any(
            value is not None and abs(abs(value) - gap) < 1e-9 for value in values
        ):
            return None
    elif not content or _spelled(gap) & _numbers(content):
        return None
    return (
        "The question asks how far apart two figures found are: "
        f"{high}: {figures[high]} = {_shown(top)}; {low}: {figures[low]} = "
        f"{_shown(bottom)}. Calculate {_shown(top)} - {_shown(bottom)} with the "
        "calculate tool, then answer with its result."
    )


def uncomputed_expression(
    content: str | None, tools: Sequence[Mapping[str, Any]]
) -> str | None:
    """The first arithmetic expression of an answer whose value the answer does
    not state, when a ``calculate`` tool is offered to compute it; else None."""
    if not content or not any(
        t.get("function", {}).get("name") == "calculate" for t in tools
    ):
        return None
    numbers = set(re.findall(r"\d+(?:[.,]\d+)*", content))
    for match in _EXPRESSION.finditer(content):
        expression = match.group(0).strip()
        value = _evaluate(expression)
        if value is None:
            continue
        if not (_spelled(value) & {n for n in numbers}):
            return expression
    return None
