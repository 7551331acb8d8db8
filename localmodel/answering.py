"""What the built-in model's handler does about kinds of wrong answer.

Pure helpers over OpenAI chat messages (``localmodel.handler`` applies them in
assistant mode, ``REACH_LOCAL_TOOL_FIRST=1``):

- **A search that found nothing, in another language.** The notes' search is
  lexical, so "the note about caching hot queries" finds no note written in
  Chinese. When a search tool's call found nothing and its words are of one
  script only, the handler asks the model to translate them into the other
  language (a short call under a grammar that allows only that script) and
  searches again with both: :func:`missed_search`, :func:`translation_prompt`,
  :func:`expanded`. It costs nothing for a search that finds something.
- **The tool's hint given as the answer.** An answer that repeats the hint of a
  search that found nothing ("Try fewer or other words") is asked again with the
  result said plainly, then, if it repeats it again, answered with the plain
  fact in the asker's language: :func:`echoed_hint`, :func:`said_plainly`,
  :func:`nothing_found`.
- **Searches that all found nothing.** The turn's answer is asked with those
  results said plainly (no note holds the words; tell the user so), so that it
  says the notes do not say rather than make a fact up:
  :func:`searches_all_missed`, :func:`said_plainly`. Notes found only through
  other words, none of which holds the name the search was for (an acronym such
  as CDN, a word such as MySQL, or one the question capitalises: "budget CDN
  预算内容" found the two notes with a budget), found nothing about it:
  :func:`names_not_found`.
- **A figure nobody gave, calculated with.** A ``calculate`` call with a number
  that no message holds is sent back for a search (the figure is in a note):
  :func:`invented_calculation`.
- **An answer wrapped as data.** ``{"content": "Sorry, …"}`` or the whole
  answer in quotation marks: the text inside is the answer (:func:`unwrapped`).
- **An answer in another language than the note it is about** names the note
  its search found alone (:func:`searched_source`).

The rules about the notes' figures (an expression not computed, sums,
differences, a figure given for the wrong note) are in ``localmodel.figures``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from localmodel.chatformat import (
    _HAN,
    _LATIN_WORD,
    _RESULT_ROLES,
    _numbers,
    _sole_string_parameter,
    _this_turn,
    _tool_call,
    asker_language,
    cite,
    content_text,
    last_user_text,
)

#: Tools whose calls look things up by words (the notes' search, long-term
#: memory's recall): a call that found nothing is retried across languages.
SEARCH_PREFIXES = ("search", "recall", "find", "lookup")
#: Words of a translation kept (a small model may ramble on).
MAX_TRANSLATED_WORDS = 6
TRANSLATION_MAX_TOKENS = 24

_LANGUAGE_NAME = {"zh": "Chinese", "en": "English"}


def _is_search(name: str) -> bool:
    return name.lower().startswith(SEARCH_PREFIXES)


def _result(message: Mapping[str, Any]) -> Any:
    try:
        return json.loads(content_text(message.get("content")))
    except ValueError:
        return None


def _found_nothing(value: Any) -> str | None:
    """The hint of a result that found nothing (a failed call's ``error``, or an
    empty ``items`` list's ``note``), else None."""
    if isinstance(value, dict):
        if isinstance(value.get("error"), str):
            return str(value["error"])
        if value.get("items") == []:
            return str(value.get("note") or "")
        return None
    if value == []:
        return ""
    return None


def _strings(arguments: Any) -> list[str]:
    """The string values of a call's JSON arguments."""
    try:
        value = json.loads(str(arguments or "{}"))
    except ValueError:
        return []
    return (
        [v for v in value.values() if isinstance(v, str)]
        if isinstance(value, dict)
        else []
    )


def _scripts(text: str) -> tuple[bool, bool]:
    return bool(_HAN.search(text)), bool(_LATIN_WORD.search(text))


@dataclass(frozen=True)
class Miss:
    """A search call of this turn that found nothing, to try again translated."""

    tool: str
    parameter: str
    words: str
    #: The language to translate the words into: ``zh`` or ``en``.
    into: str
    #: The user's message the search was for (what the words are about).
    question: str = ""


def _calls_by_id(
    messages: Sequence[Mapping[str, Any]],
) -> dict[str, Mapping[str, Any]]:
    calls: dict[str, Mapping[str, Any]] = {}
    for message in messages:
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping) and call.get("id"):
                calls[str(call["id"])] = call.get("function") or {}
    return calls


def _search_answered(
    result: Mapping[str, Any], calls: Mapping[str, Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The search call (of ``calls``, by id) that ``result`` answers, else None."""
    call = calls.get(str(result.get("tool_call_id") or ""))
    if call is None or not _is_search(str(call.get("name") or "")):
        return None
    return call


def missed_search(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
) -> Miss | None:
    """The search the turn's last result answered with nothing, when its words
    are of one script (so a translation adds words), that script is not the
    question's (whose own words were there to search), and no search of this
    turn has tried them in both scripts yet (a question about two notes may
    need both its searches translated: "How much more does the caching rework
    cost than the search experiment?" had its first search translated, and its
    second, "caching rework", found nothing and was answered from the first
    note alone, 3 of 3); None otherwise."""
    if not messages or messages[-1].get("role") not in _RESULT_ROLES:
        return None
    if _found_nothing(_result(messages[-1])) is None:
        return None
    turn = _this_turn(messages)
    calls = _calls_by_id(turn)
    call = _search_answered(messages[-1], calls)
    if call is None:
        return None
    tool = next(
        (t for t in tools if t.get("function", {}).get("name") == call.get("name")),
        None,
    )
    parameter = _sole_string_parameter(tool) if tool is not None else None
    if parameter is None:
        return None
    try:
        arguments = json.loads(str(call.get("arguments") or "{}"))
    except ValueError:
        return None
    words = arguments.get(parameter) if isinstance(arguments, dict) else None
    if not isinstance(words, str) or not words.strip():
        return None
    for earlier in calls.values():
        said = " ".join(_strings(earlier.get("arguments")))
        if (
            _is_search(str(earlier.get("name") or ""))
            and all(_scripts(said))
            and _within(words, said)
        ):
            return None  # these words were searched in both scripts this turn
    question = last_user_text(messages)
    subject = _subject_words(question) if _only_aims(words) else ""
    if subject:
        # "bill" for "If we fund both the caching rework and the search
        # experiment, what's the bill?" (2 of 3): the words searched were what
        # the question wants, not what it is about. The question's own words
        # are tried in the other language instead.
        words = subject
    han, latin = _scripts(words)
    if han == latin:
        return None
    into = "en" if han else "zh"
    if into == asker_language(messages):
        # A Chinese question searched by a name ("GPU", "Kafka"): the question's
        # own words were there to search, and a translation only brings them back
        # (GPU became 显卡预算, which found every note with a budget).
        return None
    return Miss(str(call["name"]), parameter, words.strip(), into, question)


#: What a question asks for about a thing, not the thing: a search of these
#: words alone finds no note about what the question names.
_AIMS = frozenset(
    {"bill", "bills", "cost", "costs", "price", "prices", "budget", "budgets"}
    | {"total", "sum", "amount", "money", "spend", "spending", "figure", "figures"}
    | {"number", "expense", "expenses"}
)
#: Words of an English question that name nothing a note is about.
_FUNCTION_WORDS = frozenset(
    {"what", "whats", "which", "when", "where", "does", "will", "would", "could"}
    | {"should", "much", "many", "tell", "give", "show", "please", "about", "from"}
    | {"with", "that", "this", "these", "those", "them", "their", "there", "both"}
    | {"have", "need", "into", "than", "then", "also", "each", "other", "notes"}
    | {"note", "plan", "plans", "project", "projects", "together", "combined"}
    | {"altogether", "overall", "added"}
)


def _only_aims(words: str) -> bool:
    """True when every word of a search is an aim (:data:`_AIMS`)."""
    tokens = _LATIN_WORD.findall(words)
    return (
        bool(tokens)
        and not _HAN.search(words)
        and all(token.lower() in _AIMS for token in tokens)
    )


def _subject_words(question: str) -> str:
    """The words of an English question that may name what it is about: those of
    four letters or more that are no aim and no function word, at most
    :data:`MAX_TRANSLATED_WORDS`; empty for a question in Chinese."""
    if _HAN.search(question):
        return ""
    kept = [
        word.lower()
        for word in _LATIN_WORD.findall(question.replace("'", ""))
        if len(word) >= 4
        and word.lower() not in _AIMS
        and word.lower() not in _FUNCTION_WORDS
    ]
    return " ".join(list(dict.fromkeys(kept))[:MAX_TRANSLATED_WORDS])


#: A word of a search: a run of Latin letters or digits, or of Chinese characters.
_TOKEN = re.compile(r"[a-z0-9]+|[\u4e00-\u9fff]+")


def _within(words: str, said: str) -> bool:
    """True when every word of ``words`` (a Chinese run counts as one) is in
    ``said``: the words were part of that search."""
    said = said.lower()
    return all(token in said for token in _TOKEN.findall(words.lower()))


def translation_prompt(miss: Miss) -> list[dict[str, str]]:
    """A short chat asking for the words a note in the other language would use
    for ``miss``'s search words, with the question they came from beside them
    (the words alone lose what they were about: "archive" is 档案, the note's
    word is 归档). It asks for the words' own translation, not for what a note
    answering the question would hold: asked that way, the model wrote the
    question's aim ("caching note" became 预算, "budget"; "hot queries" became
    搜索引擎技术), which found every note with a budget, or the wrong one."""
    language = _LANGUAGE_NAME[miss.into]
    asked = f"Question: {miss.question}\n" if miss.question else ""
    return [
        {
            "role": "system",
            "content": "You write search keywords. Answer with keywords only, "
            "separated by spaces.",
        },
        {
            "role": "user",
            "content": f"{asked}These search words found nothing: {miss.words}\n"
            f'Write the {language} words for "{miss.words}" that a {language} '
            f"note about it would contain.",
        },
    ]


def translation_grammar(into: str) -> str:
    """GBNF for a translation: a few words of the target script only."""
    word = "[\u4e00-\u9fff]+" if into == "zh" else "[A-Za-z]+"
    more = MAX_TRANSLATED_WORDS - 1
    return f'root ::= word (" " word){{0,{more}}}\nword ::= {word}\n'


def expanded(miss: Miss, translation: str) -> str | None:
    """``miss``'s words with their translation's words after them; None when the
    translation adds nothing."""
    han = _HAN.search
    kept = [
        word
        for word in translation.split()[:MAX_TRANSLATED_WORDS]
        if (bool(han(word)) if miss.into == "zh" else bool(_LATIN_WORD.fullmatch(word)))
        and word.lower() not in miss.words.lower()
    ]
    if not kept:
        return None
    return f"{miss.words} {' '.join(kept)}"


def search_call(miss: Miss, words: str) -> dict[str, Any]:
    """The OpenAI tool call of ``miss``'s tool with ``words``."""
    return _tool_call(miss.tool, {miss.parameter: words})


# -- calls ------------------------------------------------------------------------


def _known_numbers(messages: Sequence[Mapping[str, Any]]) -> set[str]:
    known: set[str] = set()
    for message in messages:
        # What the user said, what tools answered, and what earlier answers said
        # (a follow-up's "that" is the last answer's figure).
        if message.get("role") in ("user", "assistant", *_RESULT_ROLES):
            known |= _numbers(content_text(message.get("content")))
        for call in message.get("tool_calls") or ():
            function = call.get("function", call) if isinstance(call, Mapping) else {}
            known |= _numbers(" ".join(_strings(function.get("arguments"))))
    return known


def invented_calculation(
    calls: Sequence[Mapping[str, Any]],
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
) -> str | None:
    """The search tool to call instead, when a reply calculates with a figure
    (two digits or more) that nobody gave: ``100 * 2 + 50`` as the first reply
    to "the caching plan's budget", or ``1088 + 500`` after only the caching
    note was found, for a sum over two notes. The figures are in the notes, not
    the model's head. None for any other reply, or when no search tool is
    offered."""
    if len(calls) != 1:
        return None
    function = calls[0].get("function") or {}
    if function.get("name") != "calculate":
        return None
    written = " ".join(_strings(function.get("arguments")))
    unknown = _numbers(written) - _known_numbers(messages)
    # A lone digit is let be: a count the question implies (the 2 of an average
    # of two budgets), not a figure that needs finding.
    invented = {n for n in unknown if len(n) > 1}
    if not invented and not (unknown and _an_example_of(written, tools)):
        return None
    return _search_tool(tools)


def _search_tool(tools: Sequence[Mapping[str, Any]]) -> str | None:
    """The name of the first offered tool that searches the notes, if any."""
    return next(
        (
            str(t["function"]["name"])
            for t in tools
            if str(t.get("function", {}).get("name", "")).startswith("search")
        ),
        None,
    )


def _an_example_of(written: str, tools: Sequence[Mapping[str, Any]]) -> bool:
    """True when a ``calculate`` call's expression is one its own definition
    gives as an example (``(2 + 3) * 4``): a placeholder copied, not a figure
    of the user's question."""
    expression = re.sub(r"\s+", "", written)
    if not expression:
        return False
    for tool in tools:
        function = tool.get("function") or {}
        if function.get("name") == "calculate":
            shown = json.dumps(function, ensure_ascii=False)
            return expression in re.sub(r"\s+", "", shown)
    return False


def _signature(call: Mapping[str, Any]) -> tuple[str, str]:
    function = call.get("function") or {}
    try:
        arguments = json.loads(str(function.get("arguments") or "{}"))
    except ValueError:
        arguments = function.get("arguments")
    return str(function.get("name")), json.dumps(arguments, sort_keys=True)


def repeats_a_call(
    calls: Sequence[Mapping[str, Any]], messages: Sequence[Mapping[str, Any]]
) -> bool:
    """True when a proposed call is one this turn already made, with the same
    arguments: its result is above already, so the reply should use it."""
    made = {
        _signature(call)
        for message in _this_turn(messages)
        for call in message.get("tool_calls") or ()
        if isinstance(call, Mapping)
    }
    return any(_signature(call) in made for call in calls)


# -- the hint as the answer ----------------------------------------------------

#: Characters of a tool's hint an answer must repeat to count as repeating it.
ECHO_CHARS = 18

_PLAIN = {
    "zh": "没有找到：没有任何笔记或记录包含这些词。"
    "请用中文直接告诉用户，笔记里没有这方面的内容。",
    "en": "Nothing matched: no note or record holds these words. Tell the user "
    "plainly that the notes do not say.",
}
_PLAIN_NAMED = {
    "zh": "没有找到：找到的笔记都没有提到 {names}。"
    "请用中文直接告诉用户，笔记里没有关于 {names} 的内容。",
    "en": "Nothing about {names}: none of the notes found mentions {names}. Tell "
    "the user plainly that the notes do not say.",
}
_NOTHING_FOUND = {
    "zh": "没有找到相关内容：笔记里没有提到这一点。",
    "en": "I found nothing about that: no note mentions it.",
}


#: A name in a search's words: an acronym (CDN, GPU, K8S) or a word with a
#: capital inside (MySQL, GitHub). Names are not translated: a note about one
#: writes it as it is.
_ACRONYM = re.compile(r"^(?:[A-Z][A-Z0-9]{1,7}|[A-Za-z]*[a-z][A-Z][A-Za-z]*)$")
#: A capitalised word after a sentence's first: a name too (Kafka, Elasticsearch).
_SENTENCES = re.compile(r"[^.!?。！？]+")


def _question_names(question: str) -> set[str]:
    """The capitalised words of ``question`` that start no sentence."""
    names = set()
    for sentence in _SENTENCES.findall(question):
        for word in _LATIN_WORD.findall(sentence)[1:]:
            if len(word) > 1 and word[0].isupper():
                names.add(word.lower())
    return names


def _strings_in(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings_in(item)


def names_not_found(
    result: Mapping[str, Any], call: Mapping[str, Any], question: str
) -> list[str]:
    """The names of a search's words (see :data:`_ACRONYM`, and the question's
    capitalised words) of which no result of a search that found something
    holds any: the notes it found are about something else, matched by other
    words ("budget CDN 预算内容" found the two notes with a budget, 预算, and
    neither mentions a CDN). Empty when it found nothing or any name is there."""
    value = _result(result)
    if _found_nothing(value) is not None or value is None:
        return []
    asked = _question_names(question)
    names = [
        word
        for text in _strings(call.get("arguments"))
        for word in _LATIN_WORD.findall(text)
        if _ACRONYM.match(word) or word.lower() in asked
    ]
    found = " ".join(_strings_in(value)).lower()
    if not names or any(name.lower() in found for name in names):
        return []
    return list(dict.fromkeys(names))


def _missed(
    message: Mapping[str, Any], calls: Mapping[str, Mapping[str, Any]], question: str
) -> bool | None:
    """Whether a search's result found nothing about what it was asked (nothing
    at all, or notes that hold none of its names); None: no search's result."""
    call = _search_answered(message, calls)
    if call is None:
        return None
    return _found_nothing(_result(message)) is not None or bool(
        names_not_found(message, call, question)
    )


def searches_all_missed(messages: Sequence[Mapping[str, Any]]) -> bool:
    """True when the turn's last message is a result and every result of this
    turn's search calls (one at least) found nothing about what it was asked
    (:func:`_missed`): the answer comes next, and it should say so rather than
    make something up."""
    if not messages or messages[-1].get("role") not in _RESULT_ROLES:
        return False
    turn = _this_turn(messages)
    calls = _calls_by_id(turn)
    question = last_user_text(messages)
    searched = False
    for message in turn:
        if message.get("role") not in _RESULT_ROLES:
            continue
        missed = _missed(message, calls, question)
        if missed is None:
            continue
        if not missed:
            return False
        searched = True
    return searched


#: What a hint quotes (the search's own words): an answer may well repeat those.
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|‘[^’]*’|“[^”]*”")
#: The answer a hint suggests ("or tell the user the notes do not say."): an
#: answer that says it ("Sorry, the notes do not provide …") is that answer,
#: not an echo (it had been asked again, and then gave the budget as a span).
_SUGGESTED = re.compile(r"(?i)\btell the user\b[^.]*\.?")


def _hints(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """The hints of this turn's results that found nothing, without what they
    quote ("no note mentions any word of 'vector retrieval experiment'" quotes
    the search, and the right answer names the experiment too) or the answer
    they suggest."""
    hints = []
    for message in _this_turn(messages):
        if message.get("role") in _RESULT_ROLES:
            hint = _found_nothing(_result(message))
            if hint:
                hints.append(_SUGGESTED.sub(" ", _QUOTED.sub(" ", hint)))
    return hints


#: A hint's advice to search again with other words, in either language: an
#: answer that gives it to the user repeats the hint even when translated
#: (缓存改造什么时候上线？ was answered
#: "无法找到与“上线 launch”相关的任何笔记。请尝试使用其他单词…", 1 of 3 in
#: notes-sealed15, which shares no run of characters with the hint).
_TRY_OTHER_WORDS = re.compile(
    r"(?i)\btry (?:again )?(?:with )?(?:fewer or )?(?:other|different|another) "
    r"(?:words?|keywords?|terms?)\b|"
    r"(?:尝试|试试|试着|换)(?:用|使用)?(?:其他|别的|另外|不同)的?(?:单词|词语|词|关键词|关键字|术语)"
)


def echoed_hint(content: str | None, messages: Sequence[Mapping[str, Any]]) -> bool:
    """True when the answer repeats (a run of :data:`ECHO_CHARS` characters of)
    the hint of a result of this turn that found nothing, or gives its advice
    to try other words in either language."""
    if not content:
        return False
    said = re.sub(r"\s+", " ", content).lower()
    hints = _hints(messages)
    if hints and _TRY_OTHER_WORDS.search(said):
        return True
    for hint in hints:
        text = re.sub(r"\s+", " ", hint).lower()
        for start in range(0, max(1, len(text) - ECHO_CHARS + 1)):
            piece = text[start : start + ECHO_CHARS]
            if len(piece) == ECHO_CHARS and piece in said:
                return True
    return False


#: What the model is told when it wrote the question back as its answer.
ANSWER_IT = (
    "Your reply repeated the user's question. Answer it now from the results "
    "above, in the user's language."
)


def repeats_question(
    content: str | None, messages: Sequence[Mapping[str, Any]]
) -> bool:
    """True when the answer is the user's question written back (asked what
    the search experiment's budget expression comes to, with 740 worked out,
    the model answered with the question word for word, 3 of 3): without
    spacing and punctuation, the answer holds the question and fewer than ten
    characters besides. An answer that says the question again and then
    answers it, or that quotes a part of it ("the search experiment"), is
    none."""
    if not content:
        return False
    question = _bare(last_user_text(messages))
    said = _bare(content)
    if len(question) < 10 or question not in said:
        return False
    return len(said) - len(question) < 10


#: A name in code (``search_experiment_budget``): no sentence.
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+")

SAY_IT = (
    "Your reply was a name, not an answer. Answer the user's question now in a "
    "sentence, from the results above, in the user's language."
)


def identifier_as_answer(content: str | None) -> bool:
    """True when the whole answer is one name in code: asked to work out the
    search experiment's budget, with 740 and 1088 calculated, the model answered
    ``search_experiment_budget`` (3 of 3)."""
    return bool(content) and bool(
        _IDENTIFIER.fullmatch((content or "").strip(" .`'\""))
    )


def _bare(text: str) -> str:
    return re.sub(r"[\W_]+", "", text).lower()


def said_plainly(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with this turn's empty results, and its searches' results
    that hold none of their names (:func:`names_not_found`), replaced by the
    plain fact in the asker's language (the model then says it in its own
    words)."""
    language = asker_language(messages)
    plain = json.dumps({"found": [], "note": _PLAIN[language]}, ensure_ascii=False)
    turn = _this_turn(messages)
    turn_start = len(messages) - len(turn)
    calls = _calls_by_id(turn)
    question = last_user_text(messages)
    out: list[dict[str, Any]] = []
    for at, message in enumerate(messages):
        if at < turn_start or message.get("role") not in _RESULT_ROLES:
            out.append(dict(message))
            continue
        call = _search_answered(message, calls)
        names = names_not_found(message, call, question) if call is not None else []
        if names:
            note = _PLAIN_NAMED[language].format(names=", ".join(names))
            said = json.dumps({"found": [], "note": note}, ensure_ascii=False)
            out.append({**message, "content": said})
        elif _found_nothing(_result(message)) is not None:
            out.append({**message, "content": plain})
        else:
            out.append(dict(message))
    return out


def nothing_found(messages: Sequence[Mapping[str, Any]]) -> str:
    """The plain answer that nothing was found, in the asker's language."""
    return _NOTHING_FOUND[asker_language(messages)]


def found_notes(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The text of each note this turn's searches found, by title."""
    turn = _this_turn(messages)
    calls = _calls_by_id(turn)
    found: dict[str, str] = {}
    for message in turn:
        if message.get("role") not in _RESULT_ROLES:
            continue
        if _search_answered(message, calls) is None:
            continue
        value = _result(message)
        for item in value if isinstance(value, list) else ():
            if not isinstance(item, Mapping) or not isinstance(item.get("title"), str):
                continue
            text = " ".join(_strings_in(item.get("content")))
            found.setdefault(str(item["title"]).strip(), text)
    return found


def listing(notes: Mapping[str, str]) -> str:
    """The notes found as the rules quote them to the model: ``title: text; …``."""
    return "; ".join(f"{title}: {text}" for title, text in notes.items())


def error_as_answer(
    content: str | None, messages: Sequence[Mapping[str, Any]]
) -> str | None:
    """What to tell the model when its answer is an error object it wrote
    itself while this turn's searches found notes: after two searches found
    the logging note, it answered ``{"error": "No notes found for the keyword
    '日志系统 日志保留时间'…"}`` (3 of 3). None otherwise."""
    try:
        value = json.loads((content or "").strip())
    except ValueError:
        return None
    if not isinstance(value, dict) or "error" not in value:
        return None
    notes = found_notes(messages)
    if not notes:
        return None
    return (
        f"The searches found these notes: {listing(notes)}. Answer the user's question "
        "from them in plain words, not as data."
    )


# -- the note an answer in another language is about ----------------------------

#: An answer that says no note holds what was asked cites none.
_NEGATIVE = re.compile(
    r"(?i)\b(?:no|not|none|nothing|cannot|can't|couldn't|doesn't|don't|didn't|"
    r"isn't|aren't)\b|没有|未|无|不"
)
_WORD = re.compile(r"[A-Za-z]{3,}")
#: Words too common to tie an answer to a search.
_COMMON = frozenset(
    {"the", "and", "for", "with", "what", "which", "how", "much", "are", "was"}
    | {"does", "that", "this"}
)


def says_none(content: str) -> bool:
    """True when ``content`` says something is not there (no, not, 没有, 无…)."""
    return bool(_NEGATIVE.search(content))


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)} - _COMMON


def searched_source(
    content: str | None, messages: Sequence[Mapping[str, Any]]
) -> str | None:
    """The line naming the note an answer is about, when the answer shares no
    character pair with any note found (so ``chatformat.source_line`` cites
    none) yet repeats words of a search of this turn that found that note
    alone. An English answer about a Chinese note is such an answer: asked where
    the notes compare an inverted index with something, the model answered that
    "the search experiment" does, after "inverted index 倒排索引" had found
    搜索实验 alone, and the answer named no note. None when the answer names a
    note found, says no note holds it, or several notes would be cited."""
    if not content or says_none(content):
        return None
    said = _words(content)
    turn = _this_turn(messages)
    calls = _calls_by_id(turn)
    titles: set[str] = set()
    cited: set[str] = set()
    for message in turn:
        if message.get("role") not in _RESULT_ROLES:
            continue
        value = _result(message)
        items = [
            str(item["title"])
            for item in (value if isinstance(value, list) else ())
            if isinstance(item, Mapping) and isinstance(item.get("title"), str)
        ]
        titles.update(items)
        call = _search_answered(message, calls)
        if call is None or len(items) != 1:
            continue
        searched = " ".join(_strings(call.get("arguments")))
        if _words(searched) & said:
            cited.add(items[0])
    if len(cited) != 1 or any(title in content for title in titles):
        return None
    return cite([cited.pop()], messages)


# -- an answer wrapped as data --------------------------------------------------

_WRAPPED = re.compile(
    r'^\s*\{\s*"(?:content|answer|message|text)"\s*:\s*"(.*?)"?\s*\}?\s*$', re.S
)


def unwrapped(content: str) -> str:
    """``content`` without the wrapping a small model sometimes writes around a
    plain answer: a JSON object of one text field (closed or cut off), or
    quotation marks around the whole text."""
    match = _WRAPPED.match(content)
    if match:
        try:
            value = json.loads(content)
        except ValueError:
            pass  # cut off before it closed: the text so far is the answer
        else:
            if isinstance(value, dict) and len(value) == 1:
                [inner] = value.values()
                if isinstance(inner, str):
                    return inner.strip()
            return content  # data of another shape: not a wrapped answer
        text = match.group(1)
        try:
            return str(json.loads(f'"{text}"')).strip()
        except ValueError:
            return text.strip()
    text = content.strip()
    if len(text) > 1 and text[0] == text[-1] == '"' and '"' not in text[1:-1]:
        return text[1:-1].strip()
    return content
