"""Description lint: what makes a tool hard for a model to choose and call well.

Warnings, not errors: a tool with warnings still saves and runs. The rules follow
what confuses models in practice — a name that is not an action, a vague or short
description, parameters without descriptions, dates without a checked format
(``engine.formats``: the format is asserted before a call runs) and amounts
without a unit, writes that do not say what they change, and tools that overlap
(``find_text`` / ``search_file`` / ``query_notes`` side by side).

Works on tool definitions (mappings with ``name``, ``description``,
``parameters``, ``risk``), so it runs on unsaved tools and imported ones alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from engine.formats import CHECKED_FORMATS
from registry.models import Tool


class Rule(StrEnum):
    NAME = "name"
    DESCRIPTION = "description"
    PARAMETER = "parameter"
    FORMAT = "format"
    UNIT = "unit"
    CHANGES = "changes"
    OVERLAP = "overlap"


@dataclass(frozen=True)
class LintWarning:
    """One warning about one tool."""

    tool: str
    rule: Rule
    message: str

    def line(self) -> str:
        return f"{self.tool}: {self.rule.value}: {self.message}"


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


#: Verbs a tool name may start with (the action the model asks for).
VERBS = _set(
    """
    add analyze analyse approve archive assign attach book calculate cancel charge
    check classify clear close compare compute convert copy count create decline
    delete describe detect disable download draft edit enable estimate evaluate
    export extract fetch fill find forget format forward generate get grant import
    invite issue join list load lock log look lookup mark match merge move notify
    open order parse pause pay ping plan post predict preview publish purge put
    query rank read recall recommend record refresh refund register reject release
    reload remember remove rename render reopen reply report request reschedule
    reset resolve restart restore resume retrieve review revoke route run save scan
    schedule score search select send set share show sign sort start stop store
    submit subscribe suggest
    summarize summarise suspend sync tag test track transcribe transfer translate
    trigger unlock unsubscribe update upload upsert validate verify view watch write
    """
)

#: Words that make a description vague: the model cannot tell when to use it.
VAGUE = re.compile(
    r"\b(does (stuff|things|everything|something)|stuff|handles?|utility|"
    r"helper|misc(ellaneous)?|various|generic|general[- ]purpose|todo|tbd|"
    r"etc\.?)(?=\W|$)",
    re.IGNORECASE,
)
MIN_DESCRIPTION_CHARS = 40

#: Risks of tools that change something.
WRITES = frozenset({Tool.Risk.WRITE, Tool.Risk.IRREVERSIBLE})
#: A write says what it changes: "Changes: …" or a verb of change.
CHANGE_WORDS = re.compile(
    r"\bchanges?:|\b(creates?|updates?|deletes?|removes?|sends?|adds?|writes?|"
    r"modif(y|ies)|cancels?|charges?|publishes|posts|stores?|saves?|sets|"
    r"replaces?|moves?|transfers?|refunds?|books?|schedules?|overwrites?|"
    r"inserts?|erases?|closes?|marks?|assigns?|uploads?|revokes?|grants?|"
    r"upserts?|pays?)\b",
    re.IGNORECASE,
)

_DATE_WORDS = _set(
    "date time datetime timestamp deadline day birthday dob since until when"
)
_DATE_FORMATS = frozenset({"date", "date-time", "time", "duration"})
_DATE_HINT = re.compile(
    r"iso[ -]?8601|rfc ?3339|yyyy|hh:mm|unix|epoch|\bformat\b|\d{4}-\d{2}-\d{2}|"
    r"\d{1,2}:\d{2}",
    re.IGNORECASE,
)
_QUANTITY_WORDS = _set(
    """
    amount price cost fee fees total budget balance salary charge payment
    duration timeout delay interval ttl wait size length weight distance height
    width depth volume capacity
    """
)
_UNIT_WORDS = _set(
    """
    eur usd cny rmb gbp jpy chf cad aud cent cents currency iso 4217 euro euros
    dollar dollars yuan pound pounds yen
    ms millisecond milliseconds s sec secs second seconds min mins minute minutes
    h hr hrs hour hours day days week weeks month months year years
    b byte bytes kb kib mb mib gb gib tb characters chars tokens items lines pages
    mm cm m km meter meters metre metres mile miles ft feet inch inches
    g gram grams kg kilogram kilograms lb lbs pound ounce oz ton tons tonnes
    l liter liters litre litres ml percent pct unit units
    """
)
_UNIT_SYMBOLS = re.compile(r"[€$¥£%]")

#: Words with the same meaning for the overlap check (first of a group wins).
SYNONYMS: tuple[tuple[str, ...], ...] = (
    (
        "find",
        "search",
        "query",
        "lookup",
        "look",
        "get",
        "fetch",
        "retrieve",
        "read",
        "locate",
        "grep",
        "seek",
        "show",
        "view",
    ),
    ("list", "enumerate", "browse"),
    ("create", "add", "new", "make", "insert", "open", "register"),
    ("update", "edit", "modify", "change", "set", "patch", "upsert"),
    ("delete", "remove", "drop", "erase", "purge", "destroy"),
    ("send", "email", "mail", "message", "notify", "post"),
    ("calculate", "compute", "evaluate", "calc", "arithmetic"),
    (
        "document",
        "doc",
        "docs",
        "note",
        "notes",
        "text",
        "file",
        "files",
        "page",
        "pages",
        "content",
        "contents",
        "article",
        "articles",
        "record",
        "records",
        "entry",
        "entries",
        "knowledge",
    ),
    ("ticket", "tickets", "issue", "issues", "bug", "bugs", "case", "cases"),
    ("user", "users", "person", "people", "customer", "customers", "account"),
)
_CANONICAL = {word: group[0] for group in SYNONYMS for word in group}
_STOPWORDS = _set(
    """
    a an the and or of to in on for with by from at as is are be it its this that
    these those one two any all each every some no not than then into about
    over under up out if when which who whose what where how use used using can
    may must will would should returns return e g eg i ie me my your our their
    them they you we
    """
)
#: Overlap when the names mean the same, or descriptions share this much.
DESCRIPTION_OVERLAP = 0.5
#: Lower bar when the names start with the same (canonical) verb.
SAME_VERB_DESCRIPTION_OVERLAP = 0.3


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", text.lower()) if w]


def _canonical(word: str) -> str:
    if word in _CANONICAL:
        return _CANONICAL[word]
    for suffix in ("es", "s"):
        stem = word[: -len(suffix)]
        if word.endswith(suffix) and len(stem) > 2 and stem in _CANONICAL:
            return _CANONICAL[stem]
    if word.endswith("s") and len(word) > 3 and not word.endswith("ss"):
        return word[:-1]
    return word


def _field(tool: Any, name: str, default: Any = None) -> Any:
    if isinstance(tool, Mapping):
        return tool.get(name, default)
    return getattr(tool, name, default)


def lint_tool(tool: Any) -> list[LintWarning]:
    """Warnings about one tool on its own (everything but overlap)."""
    name = str(_field(tool, "name", "") or "")
    description = str(_field(tool, "description", "") or "").strip()
    parameters = _field(tool, "parameters") or {}
    risk = str(_field(tool, "risk", Tool.Risk.READ_ONLY) or Tool.Risk.READ_ONLY)
    warnings: list[LintWarning] = []

    def warn(rule: Rule, message: str) -> None:
        warnings.append(LintWarning(name, rule, message))

    warnings.extend(_name_warnings(name))
    if len(description) < MIN_DESCRIPTION_CHARS:
        warn(
            Rule.DESCRIPTION,
            f"The description is short ({len(description)} characters): say what "
            "the tool does, when to use it and what it returns.",
        )
    vague = VAGUE.search(description)
    if vague:
        warn(
            Rule.DESCRIPTION,
            f"The description is vague (“{vague.group(0)}”): name the exact action "
            "and its object instead.",
        )
    if risk in WRITES and not CHANGE_WORDS.search(description):
        warn(
            Rule.CHANGES,
            "This tool writes but its description does not say what it changes: "
            "add “Changes: …” (e.g. “Changes: adds one ticket”).",
        )
    if isinstance(parameters, Mapping):
        for path, schema in _parameters(parameters):
            warnings.extend(_parameter_warnings(name, path, schema))
    return warnings


def _name_warnings(name: str) -> list[LintWarning]:
    words = [w for w in name.split("_") if w]
    if not words:
        return []
    if len(words) == 1:
        if words[0] in VERBS:
            # A bare verb (calculate) names its action; its object is the argument.
            return []
        return [
            LintWarning(
                name,
                Rule.NAME,
                f"Name it verb_noun (e.g. get_{words[0]}): a name that is an action "
                "tells the model when to call it.",
            )
        ]
    if words[0] not in VERBS:
        return [
            LintWarning(
                name,
                Rule.NAME,
                f"The name should start with a verb (verb_noun, e.g. "
                f"get_{'_'.join(words)}); “{words[0]}” is not one.",
            )
        ]
    return []


def _parameters(
    schema: Mapping[str, Any], prefix: str = "", depth: int = 0
) -> Iterable[tuple[str, Mapping[str, Any]]]:
    """(path, schema) of every named parameter, nested objects included."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or depth > 4:
        return
    for key, value in properties.items():
        if not isinstance(value, Mapping):
            continue
        path = f"{prefix}{key}"
        yield path, value
        if value.get("type") == "object":
            yield from _parameters(value, f"{path}.", depth + 1)
        items = value.get("items")
        if isinstance(items, Mapping) and items.get("type") == "object":
            yield from _parameters(items, f"{path}[].", depth + 1)


def _parameter_warnings(
    tool: str, path: str, schema: Mapping[str, Any]
) -> list[LintWarning]:
    warnings: list[LintWarning] = []
    description = str(schema.get("description") or "").strip()
    if not description:
        warnings.append(
            LintWarning(
                tool,
                Rule.PARAMETER,
                f"Parameter “{path}” has no description: say what it is, with an "
                "example value.",
            )
        )
    key = path.rsplit(".", 1)[-1].removesuffix("[]")
    words = set(_words(key))
    warnings.extend(_format_warnings(tool, path, key, words, schema, description))
    if words & _QUANTITY_WORDS and not _has_unit(key, description):
        warnings.append(
            LintWarning(
                tool,
                Rule.UNIT,
                f"Parameter “{path}” is an amount without a unit: name the unit or "
                "currency in its description (e.g. “in EUR”, “in seconds”), or "
                "in its name (total_eur, timeout_s).",
            )
        )
    return warnings


def _format_warnings(
    tool: str,
    path: str,
    key: str,
    words: set[str],
    schema: Mapping[str, Any],
    description: str,
) -> list[LintWarning]:
    """A ``format`` nothing checks, or a date whose format nothing checks.

    A named, checked ``format`` (or a ``pattern``) refuses a bad value before the
    call runs; a format named only in the description is advice to the model.
    """
    name = schema.get("format")
    if isinstance(name, str) and name not in CHECKED_FORMATS:
        return [
            LintWarning(
                tool,
                Rule.FORMAT,
                f"Parameter “{path}” names the format “{name}”, which nothing "
                "checks: use one that is checked before the call runs ("
                + ", ".join(sorted(CHECKED_FORMATS))
                + ') or a "pattern".',
            )
        ]
    if not _is_date(key, words, schema) or name in _DATE_FORMATS:
        return []
    if schema.get("type") in ("integer", "number"):
        # A timestamp: no JSON-Schema format applies; name its unit and epoch.
        if _DATE_HINT.search(description):
            return []
        return [
            LintWarning(
                tool,
                Rule.FORMAT,
                f"Date/time parameter “{path}” has no format: say in its "
                "description what the number counts (e.g. Unix epoch seconds).",
            )
        ]
    if "pattern" in schema:
        return []
    if _DATE_HINT.search(description):
        return [
            LintWarning(
                tool,
                Rule.FORMAT,
                f"Date/time parameter “{path}” names its format only in the "
                'description: add "format": "date" (YYYY-MM-DD), "date-time" or '
                '"time" (RFC 3339) so that a value in another format is refused '
                "before the call runs.",
            )
        ]
    return [
        LintWarning(
            tool,
            Rule.FORMAT,
            f"Date/time parameter “{path}” has no format: add "
            '"format": "date" (YYYY-MM-DD), "date-time" or "time" (RFC 3339); '
            "a value in another format (“tomorrow”) is then refused before the "
            "call runs and the model is told what was expected.",
        )
    ]


def _is_date(key: str, words: set[str], schema: Mapping[str, Any]) -> bool:
    if schema.get("type") not in (None, "string", "integer", "number"):
        return False
    return bool(words & _DATE_WORDS) or key.endswith(("_at", "_on"))


def _has_unit(key: str, description: str) -> bool:
    name_words = _words(key)
    if len(name_words) > 1 and name_words[-1] in _UNIT_WORDS:
        return True
    if _UNIT_SYMBOLS.search(description):
        return True
    return bool(set(_words(description)) & _UNIT_WORDS)


# -- overlap -----------------------------------------------------------------------


def _name_key(name: str) -> tuple[str, ...]:
    return tuple(_canonical(w) for w in name.split("_") if w)


def _description_key(description: str) -> frozenset[str]:
    return frozenset(
        _canonical(w)
        for w in _words(description)
        if w not in _STOPWORDS and not w.isdigit() and len(w) > 1
    )


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def overlap_warnings(tools: Sequence[Any]) -> list[LintWarning]:
    """Warnings for pairs of tools a model would confuse (to both tools)."""
    keyed = [
        (
            str(_field(t, "name", "")),
            _name_key(str(_field(t, "name", ""))),
            _description_key(
                f"{_field(t, 'name', '')} {_field(t, 'description', '') or ''}"
            ),
        )
        for t in tools
    ]
    warnings: list[LintWarning] = []
    for i, (name_a, key_a, words_a) in enumerate(keyed):
        for name_b, key_b, words_b in keyed[i + 1 :]:
            reason = _overlap_reason(key_a, words_a, key_b, words_b)
            if reason is None:
                continue
            for this, other in ((name_a, name_b), (name_b, name_a)):
                warnings.append(
                    LintWarning(
                        this,
                        Rule.OVERLAP,
                        f"Overlaps {other} ({reason}): the model may pick the wrong "
                        "one. Merge them, or say in each description when to use "
                        "it instead of the other.",
                    )
                )
    return warnings


def _overlap_reason(
    key_a: tuple[str, ...],
    words_a: frozenset[str],
    key_b: tuple[str, ...],
    words_b: frozenset[str],
) -> str | None:
    if key_a and key_a == key_b:
        return "their names mean the same"
    similarity = _jaccard(words_a, words_b)
    if similarity >= DESCRIPTION_OVERLAP:
        return f"{similarity:.0%} of their description words are shared"
    same_verb = bool(key_a) and bool(key_b) and key_a[0] == key_b[0]
    if same_verb and similarity >= SAME_VERB_DESCRIPTION_OVERLAP:
        return (
            f"same action “{key_a[0]}”, {similarity:.0%} of their description "
            "words shared"
        )
    return None


def lint_tools(tools: Sequence[Any]) -> dict[str, list[LintWarning]]:
    """Warnings for each of ``tools`` (by name), overlap among them included."""
    found: dict[str, list[LintWarning]] = {
        str(_field(t, "name", "")): lint_tool(t) for t in tools
    }
    for warning in overlap_warnings(tools):
        found.setdefault(warning.tool, []).append(warning)
    return found


def lint_registry() -> dict[str, list[LintWarning]]:
    """Warnings for every registered tool (overlap across the whole registry)."""
    return lint_tools(
        list(
            Tool.objects.only(
                "name", "description", "parameters", "risk", "kind"
            ).order_by("name")
        )
    )


def lint_tool_in_registry(tool: Any) -> list[LintWarning]:
    """Warnings for ``tool`` (saved or not), overlap with the other tools included."""
    others = list(
        Tool.objects.exclude(name=_field(tool, "name", "")).only(
            "name", "description", "parameters", "risk"
        )
    )
    return lint_tools([tool, *others]).get(str(_field(tool, "name", "")), [])
