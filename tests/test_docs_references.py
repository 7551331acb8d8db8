"""Every Markdown document the code, templates, build files and docs name exists in
the repository, and so does the heading or numbered trap a reference points at.

A reference is a path ending in ``.md`` (``docs/api.md``, ``bench/README.md``,
``../README.md``), resolved against the repository's root or the folder of the
file that names it. ``docs/api.md "Tool definitions"`` names a heading of it, a
link's ``#anchor`` too, and ``docs/stack-notes.md trap 2`` (or ``traps 4, 8``)
numbered items of it. Pages that live somewhere else cannot be opened by whoever
reads the code, and drift from it unseen: name the repository's own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve()

#: Folders never scanned: tools' caches, run-time data, build output (and every
#: virtualenv, ``.venv*``).
SKIPPED_DIRS = frozenset(
    {
        ".git",
        "var",
        "build",
        "staticfiles",
        "node_modules",
        "__pycache__",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
    }
)
SCANNED_SUFFIXES = frozenset(
    {".py", ".html", ".js", ".css", ".toml", ".md", ".txt", ".yaml", ".yml", ".cfg"}
)
#: Files without a suffix that hold references: the build and CI scripts.
SCANNED_NAMES = frozenset({"Makefile", "run"})

#: Reports the benchmarks write at run time (under ``var/``), named bare in code.
WRITTEN_REPORTS = frozenset({"report.md", "latest.md", "seq.md", "conc.md", "smoke.md"})

MD_REFERENCE = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
#: What may follow a reference: a link's anchor, a quoted heading, trap numbers.
ANCHOR = re.compile(r"\A#([\w-]+)")
SECTION = re.compile(r'\A\)?,? "([^"\n]+)"')
TRAPS = re.compile(r"\A,? traps? (\d+(?:(?:, | and )\d+)*)")
#: Bare names of pages that are not in the repository (no ``.md`` to match).
BARE_NAMES = re.compile(r"\bSTACK_NOTES\b")


def scanned_files() -> Iterator[Path]:
    for path in sorted(ROOT.rglob("*")):
        relative = path.relative_to(ROOT)
        if any(
            part in SKIPPED_DIRS
            or part.startswith(".venv")
            or part.endswith(".egg-info")
            for part in relative.parts
        ):
            continue
        if not path.is_file() or path == THIS:
            continue
        if path.suffix in SCANNED_SUFFIXES or path.name in SCANNED_NAMES:
            yield path


def headings(document: Path) -> set[str]:
    return {
        line.lstrip("#").strip()
        for line in document.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }


def anchors(document: Path) -> set[str]:
    """The link anchors of a page's headings, as GitHub makes them."""
    return {
        re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        for heading in headings(document)
    }


def numbered_items(document: Path) -> set[int]:
    found = re.findall(r"^(\d+)\. ", document.read_text(encoding="utf-8"), re.M)
    return {int(number) for number in found}


def resolve(reference: str, source: Path) -> Path | None:
    for base in (ROOT, source.parent):
        candidate = (base / reference).resolve()
        if candidate.is_file() and candidate.is_relative_to(ROOT):
            return candidate
    return None


def problems_of(path: Path) -> Iterator[str]:
    yield from problems_in(path.read_text(encoding="utf-8", errors="replace"), path)


def problems_in(text: str, path: Path) -> Iterator[str]:
    """What in ``text``, held by the file ``path``, names no document (or no
    section of one) in the repository."""
    for number, line in enumerate(text.splitlines(), start=1):
        where = f"{path.relative_to(ROOT)}:{number}"
        for match in BARE_NAMES.finditer(line):
            yield f"{where}: {match.group(0)} is no file of the repository"
        for match in MD_REFERENCE.finditer(line):
            reference = match.group(1)
            if reference.startswith("var/") or reference in WRITTEN_REPORTS:
                continue
            document = resolve(reference, path)
            if document is None:
                yield f"{where}: {reference} is no file of the repository"
                continue
            rest = line[match.end() :]
            if (anchor := ANCHOR.match(rest)) and anchor.group(1) not in anchors(
                document
            ):
                yield f"{where}: {reference} has no heading #{anchor.group(1)}"
            if (section := SECTION.match(rest)) and section.group(1) not in headings(
                document
            ):
                yield f'{where}: {reference} has no heading "{section.group(1)}"'
            if traps := TRAPS.match(rest):
                wanted = {int(n) for n in re.findall(r"\d+", traps.group(1))}
                if missing := wanted - numbered_items(document):
                    yield f"{where}: {reference} has no trap {sorted(missing)}"


def test_the_scan_reads_the_code_templates_build_files_and_docs():
    scanned = {p.relative_to(ROOT).as_posix() for p in scanned_files()}
    for expected in (
        "Makefile",
        "pyproject.toml",
        "README.md",
        "reach_site/settings.py",
        "templates/base.html",
        "static/js/chat.js",
        "docs/api.md",
    ):
        assert expected in scanned


def test_every_named_document_exists_with_the_section_it_names():
    broken = [problem for path in scanned_files() for problem in problems_of(path)]
    assert broken == [], "\n".join(broken)


@pytest.mark.parametrize(
    "line, problem",
    [
        ("# See API.md.", "API.md is no file"),
        ("# (STACK_NOTES 1)", "STACK_NOTES is no file"),
        ("# shared/DESIGN.md", "shared/DESIGN.md is no file"),
        ('# docs/api.md "No such heading"', 'has no heading "No such heading"'),
        ("# docs/stack-notes.md traps 1, 99", "has no trap [99]"),
        ("[Traps](docs/stack-notes.md#no-such-heading)", "has no heading #no-such"),
    ],
)
def test_a_reference_outside_the_repository_is_reported(line, problem):
    found = list(problems_in(line, ROOT / "docs" / "probe.py"))
    assert len(found) == 1 and problem in found[0]


@pytest.mark.parametrize(
    "line",
    [
        '# docs/api.md "Tool definitions"',
        "# docs/stack-notes.md trap 1",
        "# the README (../README.md#configuration)",
        "[the files](../README.md#the-files-one-chat-message-passes-through-in-order)",
        "# writes var/bench/latest.md and report.md",
    ],
)
def test_a_reference_inside_the_repository_passes(line):
    assert list(problems_in(line, ROOT / "docs" / "probe.py")) == []
