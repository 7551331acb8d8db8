"""How ``search_notes`` matches: words, not only the exact substring.

A small model passes phrases ("实验这个方案", "Redis cache budget"); an exact
substring of them rarely occurs in a note. So a query becomes terms: each Latin
word, and for Chinese (and other CJK) runs the run itself plus its character
bigrams. A note matches when any term occurs; notes rank by how many distinct
terms they hold (a term in the title counts three times), then by how close
together the terms stand, then newest first. Pure text: no database here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W_]+", re.UNICODE)
_IS_CJK = re.compile(rf"^[{_CJK}]+$")
#: Bound the work a long query can cause.
MAX_TERMS = 24
TITLE_WEIGHT = 3


def tokens(text: str) -> Iterator[str]:
    """Every lower-cased term of ``text`` in order, repeats kept: each Latin
    word, and each CJK run followed by its character bigrams (what a full-text
    index of the text holds; ``memory`` indexes its items with it)."""
    for token in _TOKEN.findall(text.lower()):
        yield token
        if len(token) > 2 and _IS_CJK.match(token):
            for i in range(len(token) - 1):
                yield token[i : i + 2]


def terms(query: str) -> list[str]:
    """The distinct, lower-cased terms of ``query``, longest runs first. A lone
    Latin letter is no term: the "s" of "experiment's" occurs in most notes
    ("Redis"), and would match them all."""
    found: list[str] = []
    for term in tokens(query):
        if len(found) >= MAX_TERMS:
            break
        if len(term) == 1 and term.isascii() and term.isalpha():
            continue
        if term and term not in found:
            found.append(term)
    return found


@dataclass(frozen=True)
class Scored:
    index: int
    score: int
    spread: int


def rank(query_terms: Sequence[str], notes: Sequence[tuple[str, str]]) -> list[int]:
    """Indexes of ``notes`` (title, content) that match, best first; ties keep
    the order given (the caller passes newest first)."""
    scored = []
    for index, (title, content) in enumerate(notes):
        title_l, content_l = title.lower(), content.lower()
        score = 0
        positions = []
        for term in query_terms:
            in_title = term in title_l
            at = content_l.find(term)
            if in_title or at >= 0:
                score += TITLE_WEIGHT if in_title else 1
            if at >= 0:
                positions.append(at)
        if score:
            spread = max(positions) - min(positions) if len(positions) > 1 else 0
            scored.append(Scored(index, score, spread))
    scored.sort(key=lambda s: (-s.score, s.spread, s.index))
    return [s.index for s in scored]
