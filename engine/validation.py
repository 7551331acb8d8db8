"""JSON Schema: checking tool definitions and the arguments a model proposes."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError

TOOL_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{1,63}$")


class InvalidArguments(ValueError):
    """The model's arguments do not fit the tool; the message is for the model."""

    def __init__(self, message: str, error_class: str = "invalid_arguments") -> None:
        super().__init__(message)
        self.error_class = error_class


def check_tool_name(name: str) -> None:
    if not TOOL_NAME_RE.match(name or ""):
        raise ValueError(
            "Tool names are 2-64 characters of lowercase letters, digits and "
            "underscores, starting with a letter (verb_noun, e.g. search_notes)."
        )


def check_parameters_schema(schema: Any) -> None:
    """Raise ValueError unless ``schema`` is a valid draft 2020-12 object schema."""
    if not isinstance(schema, Mapping):
        raise ValueError("Parameters must be a JSON object (a JSON Schema).")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        path = "/".join(str(p) for p in exc.path)
        where = f" at /{path}" if path else ""
        raise ValueError(
            f"Not a valid JSON Schema (draft 2020-12){where}: {exc.message}"
        ) from exc
    if schema.get("type") != "object":
        raise ValueError(
            'The parameters schema must have "type": "object" at its root.'
        )
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        raise ValueError('"properties" must be an object.')
    for name in schema.get("required", []):
        if name not in properties:
            raise ValueError(f'Required parameter "{name}" is not in "properties".')


def parse_arguments(raw: str | None) -> dict[str, Any]:
    """Parse the model's argument string; raise InvalidArguments with a hint."""
    text = (raw or "").strip() or "{}"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArguments(
            f"The arguments are not valid JSON ({exc.msg} at position {exc.pos}). "
            "Send the arguments as one JSON object.",
            "invalid_json",
        ) from exc
    if not isinstance(value, dict):
        raise InvalidArguments(
            'The arguments must be a JSON object, e.g. {"name": value}.',
            "invalid_json",
        )
    return value


def validate_arguments(schema: Mapping[str, Any], arguments: dict[str, Any]) -> None:
    """Raise InvalidArguments listing every way ``arguments`` break ``schema``."""
    validator = Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(arguments), key=_error_sort_key)
    if not errors:
        return
    messages = []
    for error in errors[:5]:
        path = "/".join(str(p) for p in error.absolute_path)
        messages.append(f"{path or 'arguments'}: {error.message}")
    properties = schema.get("properties", {})
    hint = ""
    if isinstance(properties, Mapping) and properties:
        hint = (
            " Expected parameters: "
            + ", ".join(
                f"{name} ({_describe(spec)})" for name, spec in properties.items()
            )
            + "."
        )
    raise InvalidArguments("Invalid arguments: " + "; ".join(messages) + "." + hint)


def _error_sort_key(error: ValidationError) -> str:
    return "/".join(str(p) for p in error.absolute_path)


def _describe(spec: Any) -> str:
    if isinstance(spec, Mapping):
        kind = spec.get("type", "any")
        return str(kind)
    return "any"
