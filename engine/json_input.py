"""JSON from outside (a request body, a model's arguments): decoded strictly and
checked before anything stores it.

Python's decoder takes what JSON does not (``NaN``, ``Infinity``, ``1e400`` as
infinity), recurses once per level of nesting (a deep document overflows the
stack as ``RecursionError``, which no ``except ValueError`` catches) and keeps
lone surrogates and NUL characters that no UTF-8 encoder nor PostgreSQL takes,
and integers too large for the canonical form (RFC 8785) that hashes them.
:func:`loads_strict` and :func:`json_problem` turn each of these into a
``ValueError`` or a message, so every door answers them the same way.
"""

from __future__ import annotations

import json
import math
from typing import Any, NoReturn

#: The deepest nesting of objects and arrays taken in. Deep enough for any
#: trace document (its steps' arguments and results included), shallow enough
#: that the code walking a value (redaction, canonical JSON, JSON Schema
#: validation) never runs out of stack.
MAX_JSON_DEPTH = 64


#: The largest integer every JSON reader keeps exactly (I-JSON, RFC 7493); the
#: canonical form that hashes arguments (RFC 8785) refuses larger ones.
MAX_SAFE_INTEGER = 2**53 - 1


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def loads_strict(text: str) -> Any:
    """``json.loads`` taking only JSON: no NaN or Infinity, no number out of
    float range; nesting too deep to decode is a ``ValueError`` too.

    Raises ``json.JSONDecodeError`` for bad syntax, ``ValueError`` otherwise.
    """
    try:
        return json.loads(
            text, parse_constant=_reject_constant, parse_float=_finite_float
        )
    except RecursionError:
        # The decoder gives up near the stack's limit: a value nested too deeply.
        raise ValueError(f"it nests more than {MAX_JSON_DEPTH} levels deep") from None


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored everywhere, or None."""
    if text.isascii():
        return "it contains a NUL character (\\u0000)" if "\x00" in text else None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "it contains a lone surrogate (an unpaired \\ud800-\\udfff escape)"
    if "\x00" in text:
        return "it contains a NUL character (\\u0000)"
    return None


def _pointer(path: tuple[str | int, ...]) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)


def json_problem(
    value: Any, *, max_depth: int = MAX_JSON_DEPTH
) -> tuple[str, str | None] | None:
    """Why ``value`` may not be taken in, and the top-level key it sits under
    (for an object), or None: nesting deeper than ``max_depth``, text that
    cannot be stored (:func:`text_problem`), a number that is not finite or an
    integer beyond ``MAX_SAFE_INTEGER``.

    Iterative: the check itself never recurses on untrusted depth.
    """
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        field = str(path[0]) if path and isinstance(value, dict) else None
        if isinstance(node, str):
            problem = text_problem(node)
            if problem is not None:
                message = f"The text at {_pointer(path)} cannot be stored: {problem}."
                return message, field
            continue
        if isinstance(node, float) and not math.isfinite(node):
            return f"The number at {_pointer(path)} is not finite.", field
        if isinstance(node, int) and not -MAX_SAFE_INTEGER <= node <= MAX_SAFE_INTEGER:
            message = (
                f"The number at {_pointer(path)} is outside the integers JSON "
                f"carries exactly (±{MAX_SAFE_INTEGER})."
            )
            return message, field
        if not isinstance(node, dict | list | tuple):
            continue
        if len(path) >= max_depth:
            message = f"The value nests more than {max_depth} levels deep"
            return f"{message} (at {_pointer(path)}).", field
        if isinstance(node, dict):
            for key, item in node.items():
                problem = text_problem(key) if isinstance(key, str) else None
                if problem is not None:
                    where = _pointer(path)
                    return f"A key under {where} cannot be stored: {problem}.", field
                stack.append((item, (*path, key)))
        else:
            stack.extend((item, (*path, index)) for index, item in enumerate(node))
    return None
