"""Canonical JSON (RFC 8785) for hashes, repeated-call detection and cache keys."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785


def canonical_json(value: Any) -> str:
    """Serialise ``value`` as RFC 8785 canonical JSON text."""
    return rfc8785.dumps(value).decode("utf-8")


def canonical_hash(value: Any) -> str:
    """The sha256 hex digest of the canonical JSON of ``value``."""
    return hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def call_signature(tool: str, arguments: Any) -> str:
    """A stable identity for "this tool with these arguments"."""
    return canonical_hash({"tool": tool, "arguments": arguments})


def dumps(value: Any) -> str:
    """JSON for humans and models: UTF-8, non-ASCII unescaped, compact."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
