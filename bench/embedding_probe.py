"""Would the built-in model's own embeddings find the right demo note?

Semantic retrieval across languages needs a multilingual embedding model, and
none installs from the package registry with its weights (the README says which
were tried). The chat model is multilingual, so this probe asks its weights, run
by llama-cpp in embedding mode, which of the three demo notes is nearest to each
question of the local suites, and prints how often that is the note the case
expects, and whether a score tells a question no note answers from one a note
does. It reads the suites and the notes; it changes nothing.

``python -m bench.embedding_probe [--pooling last|mean] [--plain]``

``--plain`` embeds the text itself; without it each text is wrapped as
``This sentence : "…" means in one word:"`` (the PromptEOL prompt that makes a
decoder's last token summarise its input).
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
from pathlib import Path
from typing import Any

import llama_cpp
import yaml

from effects.search import rank, terms
from localmodel.install import model_path

ROOT = Path(__file__).resolve().parents[1]
SUITES = sorted((ROOT / "evals" / "suites").glob("notes-*.yaml"))

#: ``reach_site/demo.py``'s notes (read from there would need Django set up).
NOTES = [
    ("缓存改造", "使用 Redis 缓存热点查询，预算表达式为 128 * 6 + 320。"),
    ("日志系统", "使用文件轮转和定时归档，保留最近七天记录。"),
    ("搜索实验", "比较倒排索引与向量检索，预算表达式为 500 + 240。"),
]


def expected(case: dict[str, Any]) -> set[int]:
    """The notes a case's expected answer comes from (none for a question no
    note answers; both budgets for a sum or difference)."""
    expect = case.get("expect", {})
    text = " ".join(
        [*expect.get("answer_contains", []), expect.get("answer_regex", "")]
    )
    if re.search(r"1828|348", text):
        return {0, 2}
    found = set()
    patterns = (r"1088|缓存改造", r"七|seven|日志系统|\\b7", r"740|搜索实验")
    for index, pattern in enumerate(patterns):
        if re.search(pattern, text):
            found.add(index)
    return found


def dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pooling", choices=("last", "mean"), default="last")
    parser.add_argument("--plain", action="store_true", help="no PromptEOL wrapping")
    options = parser.parse_args()
    pooling = {
        "last": llama_cpp.LLAMA_POOLING_TYPE_LAST,
        "mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN,
    }[options.pooling]
    llm = llama_cpp.Llama(
        model_path=str(model_path()),
        embedding=True,
        pooling_type=pooling,
        n_ctx=512,
        n_threads=2,
        verbose=False,
    )

    def embed(text: str) -> list[float]:
        if not options.plain:
            text = f'This sentence : "{text}" means in one word:"'
        vector = llm.embed(text)
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector]

    notes = [embed(f"{title}：{content}") for title, content in NOTES]
    right = lexical = hybrid = single = unanswered_given = 0
    answerable: list[float] = []
    unanswerable: list[float] = []
    for suite in SUITES:
        for case in yaml.safe_load(suite.read_text())["cases"]:
            if not isinstance(case["input"], str):
                continue  # a conversation: its later turns search nothing new
            question = embed(case["input"])
            scores = [dot(question, note) for note in notes]
            best = max(range(len(notes)), key=scores.__getitem__)
            want = expected(case)
            (answerable if want else unanswerable).append(scores[best])
            ranked = rank(terms(case["input"]), NOTES)
            if not want and not ranked:
                unanswered_given += 1  # lexical finds nothing; the nearest is a note
            if len(want) == 1:
                single += 1
                right += best in want
                lexical += bool(ranked) and ranked[0] in want
                hybrid += (ranked[0] if ranked else best) in want
                if best not in want:
                    print(f"missed {suite.stem}/{case['id']}: {case['input']}")
    print(
        f"pooling {options.pooling}, {'plain' if options.plain else 'PromptEOL'}: "
        f"the right note nearest for {right} of {single} one-note questions"
    )
    print(
        f"search_notes' ranking, the question's own words as the query: the right "
        f"note first for {lexical} of {single}; that ranking, and the nearest note "
        f"when it finds none: {hybrid} of {single}, while {unanswered_given} of "
        f"{len(unanswerable)} questions no note answers would then be given a note"
    )
    print(
        f"nearest score: answerable median {statistics.median(answerable):.3f} "
        f"(min {min(answerable):.3f}); no note answers: median "
        f"{statistics.median(unanswerable):.3f} (max {max(unanswerable):.3f})"
    )


if __name__ == "__main__":
    main()
