"""A GBNF grammar compiler: JSON schemas into llama.cpp grammar rules, in pure Python.

:class:`Grammar` collects named rules (``root`` first); :class:`SchemaConverter`
translates the subset of JSON schema tool parameters use into rules that emit
compact JSON; :func:`gbnf_literal` quotes a string and :func:`_excluding_rules`
matches text that never contains a given string. :mod:`localmodel.chatformat`
builds each request's grammar (its reply convention) with them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

JSON_RULES: dict[str, str] = {
    "json-char": r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "json-string": r'"\"" json-char* "\""',
    "json-integer": r'"-"? ([0-9] | [1-9] [0-9]{1,15})',
    "json-number": (
        r'"-"? ([0-9] | [1-9] [0-9]{1,15}) ("." [0-9]{1,16})? '
        r"([eE] [-+]? [0-9]{1,3})?"
    ),
    "json-boolean": r'"true" | "false"',
    "json-null": r'"null"',
    "json-object": (
        r'"{" (json-string ": " json-value (", " json-string ": " json-value)*)? "}"'
    ),
    "json-array": r'"[" (json-value (", " json-value)*)? "]"',
    "json-value": (
        "json-object | json-array | json-string | json-number | json-boolean"
        " | json-null"
    ),
}

_TYPE_RULES = {
    "string": "json-string",
    "integer": "json-integer",
    "number": "json-number",
    "boolean": "json-boolean",
    "null": "json-null",
}


def gbnf_literal(text: str) -> str:
    """Quote ``text`` as a GBNF string literal."""
    out: list[str] = []
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _class_chars(chars: Sequence[str]) -> str:
    out: list[str] = []
    for char in chars:
        if char in "\\]^-[":
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02X}")
        else:
            out.append(char)
    return "".join(out)


class Grammar:
    """A GBNF grammar under construction: named rules, ``root`` first."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {}
        self.reserved: set[str] = set()

    def add(self, name: str, body: str) -> str:
        """Add a rule (a fresh name when ``name`` is taken by another body)."""
        base = re.sub(r"[^A-Za-z0-9-]+", "-", name).strip("-") or "rule"
        candidate, number = base, 1
        while candidate in self.rules and self.rules[candidate] != body:
            if candidate in self.reserved:
                self.reserved.discard(candidate)
                break
            number += 1
            candidate = f"{base}{number}"
        self.rules[candidate] = body
        return candidate

    def reserve(self, name: str) -> str:
        """Reserve a rule name to be defined later (for recursive ``$ref``s); the
        first ``add`` under that name takes it."""
        reserved = self.add(name, "")
        self.reserved.add(reserved)
        return reserved

    def define(self, name: str, body: str) -> None:
        """Give a reserved rule its body."""
        self.rules[name] = body

    def use_json(self) -> None:
        """Add the generic JSON rules."""
        for name, body in JSON_RULES.items():
            self.rules.setdefault(name, body)

    def render(self) -> str:
        """The grammar text, ``root`` first."""
        names = sorted(self.rules, key=lambda name: name != "root")
        return "".join(f"{name} ::= {self.rules[name]}\n" for name in names)


class SchemaConverter:
    """Translate a JSON schema into GBNF rules emitting compact JSON.

    Supports the subset tool parameters use: ``type`` (or a list of types),
    ``properties``/``required`` (keys in declared order, optional ones may be left
    out), ``items`` with ``minItems``/``maxItems``, ``enum``, ``const``, ``anyOf``/
    ``oneOf``, ``allOf`` of objects, local ``$ref``s and string ``minLength``/
    ``maxLength``. Anything else accepts any JSON value of the stated type.
    """

    def __init__(self, grammar: Grammar, root_schema: Any) -> None:
        self.grammar = grammar
        self.defs: dict[str, Any] = {}
        self.refs: dict[str, str] = {}
        if isinstance(root_schema, Mapping):
            for key in ("definitions", "$defs"):
                if isinstance(root_schema.get(key), Mapping):
                    self.defs.update(root_schema[key])

    def _primitive(self, rule: str) -> str:
        self.grammar.use_json()
        return rule

    def visit(self, schema: Any, name: str) -> str:
        """Return a GBNF expression for ``schema``; ``name`` prefixes new rules."""
        if not isinstance(schema, Mapping) or not schema:
            return self._primitive("json-value")
        if "$ref" in schema:
            return self._ref(str(schema["$ref"]))
        if "const" in schema:
            return gbnf_literal(json.dumps(schema["const"], ensure_ascii=False))
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            literals = [
                gbnf_literal(json.dumps(value, ensure_ascii=False))
                for value in schema["enum"]
            ]
            return "(" + " | ".join(literals) + ")"
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                options = [
                    self.visit(option, f"{name}-{number}")
                    for number, option in enumerate(schema[key])
                ]
                return "(" + " | ".join(options) + ")"
        if isinstance(schema.get("allOf"), list):
            return self.visit(self._merge_all_of(schema), name)
        kind = schema.get("type")
        if isinstance(kind, list):
            if not kind:
                return self._primitive("json-value")
            options = [
                self.visit({**schema, "type": item}, f"{name}-{item}") for item in kind
            ]
            return "(" + " | ".join(options) + ")"
        if kind == "object" or (kind is None and "properties" in schema):
            return self._object(schema, name)
        if kind == "array" or (kind is None and "items" in schema):
            return self._array(schema, name)
        if kind == "string":
            return self._string(schema, name)
        if kind in _TYPE_RULES:
            return self._primitive(_TYPE_RULES[kind])
        return self._primitive("json-value")

    def _ref(self, ref: str) -> str:
        if ref in self.refs:
            return self.refs[ref]
        match = re.fullmatch(r"#/(?:\$defs|definitions)/(.+)", ref)
        if not match or match.group(1) not in self.defs:
            return self._primitive("json-value")
        rule = self.grammar.reserve(f"ref-{match.group(1)}")
        self.refs[ref] = rule
        expression = self.visit(self.defs[match.group(1)], rule)
        if expression != rule:
            self.grammar.reserved.discard(rule)
            self.grammar.define(rule, expression)
        return rule

    def _resolve(self, schema: Any) -> Any:
        if isinstance(schema, Mapping) and "$ref" in schema:
            match = re.fullmatch(r"#/(?:\$defs|definitions)/(.+)", str(schema["$ref"]))
            if match and match.group(1) in self.defs:
                return self.defs[match.group(1)]
        return schema

    def _merge_all_of(self, schema: Mapping[str, Any]) -> dict[str, Any]:
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        properties: dict[str, Any] = dict(merged.get("properties") or {})
        required: list[str] = list(merged.get("required") or [])
        for part in schema["allOf"]:
            part = self._resolve(part)
            if not isinstance(part, Mapping):
                continue
            properties.update(part.get("properties") or {})
            required.extend(part.get("required") or [])
            for key, value in part.items():
                if key not in ("properties", "required"):
                    merged.setdefault(key, value)
        if properties:
            merged["properties"] = properties
            merged.setdefault("type", "object")
        if required:
            merged["required"] = list(dict.fromkeys(required))
        return merged

    def _object(self, schema: Mapping[str, Any], name: str) -> str:
        properties = schema.get("properties")
        if not isinstance(properties, Mapping) or not properties:
            if schema.get("additionalProperties") is False or "properties" in schema:
                return gbnf_literal("{}")
            return self._primitive("json-object")
        required = set(schema.get("required") or ())
        keys = list(properties)
        pairs = [
            gbnf_literal(json.dumps(key, ensure_ascii=False) + ": ")
            + " "
            + self.visit(properties[key], f"{name}-{key}")
            for key in keys
        ]

        def tail(start: int) -> str:
            items = []
            for index in range(start, len(keys)):
                item = f'", " {pairs[index]}'
                items.append(item if keys[index] in required else f"({item})?")
            return " ".join(items)

        # The first pair written is any key up to and including the first required
        # one; every later pair is preceded by ", ".
        firsts: list[str] = []
        for index, key in enumerate(keys):
            firsts.append(f"{pairs[index]} {tail(index + 1)}".strip())
            if key in required:
                break
        body = "(" + " | ".join(firsts) + ")"
        if not required & set(keys):
            body += "?"
        return self.grammar.add(name, f'"{{" {body} "}}"')

    def _array(self, schema: Mapping[str, Any], name: str) -> str:
        item = self.visit(schema.get("items"), f"{name}-item")
        low = int(schema.get("minItems") or 0)
        high = schema.get("maxItems")
        high = None if high is None else int(high)
        if high is not None and high <= 0:
            return gbnf_literal("[]")
        more_low = max(low - 1, 0)
        more_high = "" if high is None else str(high - 1)
        body = f'{item} (", " {item}){{{more_low},{more_high}}}'
        if low == 0:
            body = f"({body})?"
        return self.grammar.add(name, f'"[" {body} "]"')

    def _string(self, schema: Mapping[str, Any], name: str) -> str:
        low = schema.get("minLength")
        high = schema.get("maxLength")
        if low is None and high is None:
            return self._primitive("json-string")
        self.grammar.use_json()
        bound = f"{{{int(low or 0)},{'' if high is None else int(high)}}}"
        return self.grammar.add(f"{name}-string", f'"\\"" json-char{bound} "\\""')


def _excluding_rules(grammar: Grammar, name: str, forbidden: str) -> str:
    """Add rules matching non-empty text that never contains ``forbidden``.

    The rules are the states of the substring-matching automaton (as in KMP): state
    ``k`` means the text ends with the first ``k`` characters of ``forbidden``.
    """
    size = len(forbidden)
    alphabet = sorted(set(forbidden))

    def step(state: int, char: str) -> int:
        seen = forbidden[:state] + char
        for length in range(min(len(seen), size), 0, -1):
            if seen.endswith(forbidden[:length]):
                return length
        return 0

    states = [f"{name}-s{state}" for state in range(size)]

    def moves(state: int) -> str:
        targets: dict[int, list[str]] = {}
        for char in alphabet:
            targets.setdefault(step(state, char), []).append(char)
        leaving = [c for target, chars in targets.items() if target for c in chars]
        options = [f"[^{_class_chars(leaving)}] {states[0]}"]
        for target, chars in sorted(targets.items()):
            if 0 < target < size:
                options.append(f"[{_class_chars(chars)}] {states[target]}")
        return " | ".join(options)

    for state in range(size):
        grammar.define(states[state], f"({moves(state)})?")
    return grammar.add(name, moves(0))
