"""Safe evaluation of arithmetic and approval-rule expressions.

Nothing here calls ``eval``, ``exec`` or ``compile``-to-code: the expression is
parsed with ``ast.parse(..., mode="eval")`` and the resulting tree is checked
against a whitelist and then walked by a small interpreter. This module must
stay free of Django imports.

Two entry points:

``evaluate_arithmetic(expression)``
    For the ``calculate`` tool. Numbers, binary ``+ - * /``, unary ``+ -`` and
    parentheses only. Error messages are written for a (small) language model:
    they say what is wrong and what to write instead.

``evaluate_rule(expression, variables)`` / ``validate_rule(expression)``
    For approval-policy rules written by operators, e.g.
    ``amount > 100 and currency == "EUR"``.

Documented choices
------------------
* Limits (module constants): arithmetic expressions at most
  ``MAX_EXPRESSION_LENGTH`` (500) characters, rules at most ``MAX_RULE_LENGTH``
  (2000, so that a string literal of up to ``MAX_STRING_LITERAL_LENGTH`` fits);
  at most ``MAX_NODES`` syntax nodes and a nesting depth of at most
  ``MAX_DEPTH``. A flat chain such as ``1 + 2 + 3 + ...`` counts as one level
  (it is evaluated iteratively); parentheses, unary operators, function
  arguments, list items and comparison operands each add a level.
* Numeric literals: magnitude at most 1e15 (integers: at most 16 digits).
  Every intermediate and final arithmetic result must stay within 1e18 in
  magnitude and be finite.
* ``/`` between two integers gives an ``int`` when the division is exact
  (``8/2 -> 4``) and a ``float`` otherwise (``7/2 -> 3.5``). ``+ - *`` keep
  Python's int/float semantics; ``-0.0`` is reported as ``0.0``.
* Underscore digit separators (``1_000``) are accepted, as in Python.
* Arithmetic input: leading/trailing whitespace and one trailing ``=`` are
  ignored; full-width and Unicode operators (＋ － × ÷ （ ） ＊ ／ ． − and
  full-width digits and spaces) are normalised to ASCII before parsing.
  Line breaks and other control characters are rejected.
* Rules: line breaks and tabs are treated as spaces (multi-line rules from an
  admin text area work); no Unicode normalisation is applied (strings in rules
  are matched as written).
* Missing variables evaluate to ``None``. ``None`` propagates through
  arithmetic and value functions (``len``, ``lower``, ``upper``, ``domain``,
  ``abs``, ``min``, ``max``, ``round``); ordering comparisons
  (``< <= > >=``) and ``in`` with a ``None`` operand are ``False``, ``not in``
  is always the negation of ``in`` and ``!=`` of ``==`` (so ``x == None``
  tests for a missing value); the predicates ``startswith``, ``endswith`` and
  ``contains`` are ``False`` when an argument is ``None``. A rule therefore
  never fails just because an optional argument is absent; ``validate_rule``
  can be given the known argument names to catch typos at save time.
* ``startswith``, ``endswith`` and ``contains`` compare text
  case-insensitively (email addresses and domains); ``==``, ``in`` and the
  ordering operators are exact. ``startswith``/``endswith`` also accept a
  list of prefixes/suffixes.
* Real type errors (``"a" > 1``, ``lower(5)``, ``"a" * 3``) raise
  ``EvaluationError`` at evaluation time; callers should fail closed.
"""

from __future__ import annotations

import ast
import math
import unicodedata
from collections.abc import Callable, Mapping, Sequence, Sized
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Final, TypeGuard, TypeVar

__all__ = [
    "MAX_DEPTH",
    "MAX_EXPRESSION_LENGTH",
    "MAX_INT_LITERAL_DIGITS",
    "MAX_LITERAL_MAGNITUDE",
    "MAX_NODES",
    "MAX_RESULT_MAGNITUDE",
    "MAX_RULE_LENGTH",
    "MAX_STRING_LITERAL_LENGTH",
    "RULE_FUNCTIONS",
    "DivisionByZero",
    "EvaluationError",
    "evaluate_arithmetic",
    "evaluate_rule",
    "validate_rule",
]

MAX_EXPRESSION_LENGTH: Final = 500
MAX_RULE_LENGTH: Final = 2000
MAX_NODES: Final = 200
MAX_DEPTH: Final = 50
MAX_LITERAL_MAGNITUDE: Final = 10**15
MAX_INT_LITERAL_DIGITS: Final = 16
MAX_RESULT_MAGNITUDE: Final = 10**18
MAX_STRING_LITERAL_LENGTH: Final = 1000

_T = TypeVar("_T")


class EvaluationError(ValueError):
    """The expression is invalid or cannot be evaluated.

    The message is user-facing: it says what is wrong and what to do instead.
    """


class DivisionByZero(EvaluationError):
    """The expression divides by zero."""

    def __init__(self, message: str = "Division by zero.") -> None:
        super().__init__(message)


# --------------------------------------------------------------------------
# Modes


@dataclass(frozen=True)
class _Mode:
    rules: bool
    max_length: int
    hint: str


_ARITHMETIC_HINT: Final = "Use only numbers, + - * / and parentheses."
_RULE_HINT: Final = (
    "Rules may use argument names, numbers, quoted text, True/False/None, "
    'lists like ["a", "b"], comparisons (== != < <= > >= in, not in), '
    "and/or/not, + - * / and the functions "
    "len, lower, upper, startswith, endswith, contains, domain, abs, min, max, "
    "round."
)
_ARITHMETIC: Final = _Mode(False, MAX_EXPRESSION_LENGTH, _ARITHMETIC_HINT)
_RULE: Final = _Mode(True, MAX_RULE_LENGTH, _RULE_HINT)

_FULLWIDTH: Final = str.maketrans(
    {
        "＋": "+",
        "－": "-",
        "−": "-",  # U+2212 MINUS SIGN
        "×": "*",
        "÷": "/",
        "（": "(",
        "）": ")",
        "＊": "*",
        "／": "/",
        "．": ".",
        "\u3000": " ",  # ideographic space
        "\u00a0": " ",  # no-break space
        "\t": " ",
        **{chr(0xFF10 + i): str(i) for i in range(10)},  # full-width digits
    }
)
_RULE_SPACES: Final = str.maketrans({"\t": " ", "\n": " ", "\r": " "})

_ARITH_OPS: Final = (ast.Add, ast.Sub, ast.Mult, ast.Div)
_OP_SYMBOLS: Final[dict[type[ast.AST], str]] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.Pow: "**",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.MatMult: "@",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}

_FORBIDDEN_NODES: Final[dict[type[ast.AST], str]] = {
    ast.Attribute: "Attribute access is",
    ast.Subscript: "Indexing and slicing are",
    ast.Slice: "Slices are",
    ast.Lambda: "Lambda functions are",
    ast.IfExp: "Conditional expressions (x if c else y) are",
    ast.ListComp: "Comprehensions are",
    ast.SetComp: "Comprehensions are",
    ast.DictComp: "Comprehensions are",
    ast.GeneratorExp: "Generator expressions are",
    ast.Dict: "Dictionaries are",
    ast.Set: "Sets are",
    ast.Starred: "Star-unpacking (*x) is",
    ast.NamedExpr: "Assignment expressions (:=) are",
    ast.JoinedStr: "f-strings are",
    ast.FormattedValue: "f-strings are",
    ast.Await: "'await' is",
    ast.Yield: "'yield' is",
    ast.YieldFrom: "'yield' is",
}


# --------------------------------------------------------------------------
# Small helpers


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _snippet(source: str, node: ast.AST) -> str:
    segment = ast.get_source_segment(source, node)
    return _short(segment if segment is not None else type(node).__name__)


def _describe(value: object) -> str:
    if value is None:
        return "None (a missing value)"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, int):
        if value.bit_length() > 200:
            return "a very large number"
        return f"a number ({value})"
    if isinstance(value, float):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"text ({_short(repr(value), 40)})"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a dict"
    if isinstance(value, set | frozenset):
        return "a set"
    return f"a value of type {type(value).__name__}"


def _check_result(value: int | float) -> int | float:
    if isinstance(value, float) and not math.isfinite(value):
        raise EvaluationError(
            "The result is not a finite number (it overflowed). Use smaller numbers."
        )
    if abs(value) > MAX_RESULT_MAGNITUDE:
        raise EvaluationError(
            "The result is too large: results must stay within 1e18 in "
            "magnitude. Use smaller numbers or split the calculation."
        )
    return value


# --------------------------------------------------------------------------
# Rule functions


@dataclass(frozen=True)
class _Function:
    signature: str
    min_args: int
    max_args: int | None
    impl: Callable[[Sequence[object]], object]


def _arg_error(name: str, expected: str, value: object) -> EvaluationError:
    return EvaluationError(f"{name}() expects {expected}, got {_describe(value)}.")


def _unary(
    name: str,
    expected: str,
    accepts: Callable[[object], TypeGuard[_T]],
    apply: Callable[[_T], object],
) -> Callable[[Sequence[object]], object]:
    """A one-argument function: None passes through (a missing argument is no
    error), a value ``accepts`` refuses is named in the error."""

    def impl(args: Sequence[object]) -> object:
        value = args[0]
        if value is None:
            return None
        if not accepts(value):
            raise _arg_error(name, expected, value)
        return apply(value)

    return impl


def _is_text(value: object) -> TypeGuard[str]:
    return isinstance(value, str)


def _is_sized(value: object) -> TypeGuard[Sized]:
    return isinstance(value, str | list | tuple | dict | set | frozenset)


def _domain(address: str) -> str:
    if "@" not in address:
        return ""
    return address.strip().rpartition("@")[2].strip().rstrip(">").strip().lower()


_fn_len = _unary("len", "text or a list", _is_sized, len)
_fn_lower = _unary("lower", "text", _is_text, str.lower)
_fn_upper = _unary("upper", "text", _is_text, str.upper)
_fn_domain = _unary("domain", "an email address (text)", _is_text, _domain)
_fn_abs = _unary("abs", "a number", _is_number, abs)


def _text_options(name: str, value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return [v for v in value if isinstance(v, str)]
    raise _arg_error(name, "text or a list of texts as its second argument", value)


def _affix(name: str, args: Sequence[object], *, start: bool) -> bool:
    text, affix = args
    if text is None or affix is None:
        return False
    if not isinstance(text, str):
        raise _arg_error(name, "text as its first argument", text)
    folded = text.casefold()
    options = [o.casefold() for o in _text_options(name, affix)]
    if start:
        return any(folded.startswith(o) for o in options)
    return any(folded.endswith(o) for o in options)


def _fn_startswith(args: Sequence[object]) -> object:
    return _affix("startswith", args, start=True)


def _fn_endswith(args: Sequence[object]) -> object:
    return _affix("endswith", args, start=False)


def _loose_equal(a: object, b: object) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.casefold() == b.casefold()
    return a == b


def _fn_contains(args: Sequence[object]) -> object:
    container, item = args
    if container is None or item is None:
        return False
    if isinstance(container, str):
        if not isinstance(item, str):
            raise _arg_error("contains", "text as the second argument", item)
        return item.casefold() in container.casefold()
    if isinstance(container, list | tuple | dict | set | frozenset):
        return any(_loose_equal(element, item) for element in container)
    raise _arg_error("contains", "text or a list as its first argument", container)


def _extreme(name: str, args: Sequence[object], pick: Callable[..., object]) -> object:
    items: Sequence[object] = args
    if len(args) == 1 and isinstance(args[0], list | tuple):
        items = args[0]
    if not items or any(item is None for item in items):
        return None
    if all(_is_number(item) for item in items) or all(
        isinstance(item, str) for item in items
    ):
        return pick(items)
    raise EvaluationError(
        f"{name}() needs all numbers or all text, got a mix: "
        + ", ".join(_describe(item) for item in items[:5])
        + "."
    )


def _fn_min(args: Sequence[object]) -> object:
    return _extreme("min", args, min)


def _fn_max(args: Sequence[object]) -> object:
    return _extreme("max", args, max)


def _fn_round(args: Sequence[object]) -> object:
    value = args[0]
    digits = args[1] if len(args) > 1 else 0
    if value is None or digits is None:
        return None
    if not _is_number(value):
        raise _arg_error("round", "a number", value)
    if not (isinstance(digits, int) and not isinstance(digits, bool)):
        raise _arg_error("round", "a whole number of digits", digits)
    if not -15 <= digits <= 15:
        raise EvaluationError("round() digits must be between -15 and 15.")
    if not math.isfinite(value):
        raise _arg_error("round", "a finite number", value)
    return round(value) if len(args) == 1 else round(value, digits)


_FUNCTIONS: Final[dict[str, _Function]] = {
    "len": _Function("len(value)", 1, 1, _fn_len),
    "lower": _Function("lower(text)", 1, 1, _fn_lower),
    "upper": _Function("upper(text)", 1, 1, _fn_upper),
    "startswith": _Function("startswith(text, prefix)", 2, 2, _fn_startswith),
    "endswith": _Function("endswith(text, suffix)", 2, 2, _fn_endswith),
    "contains": _Function("contains(text_or_list, item)", 2, 2, _fn_contains),
    "domain": _Function("domain(email)", 1, 1, _fn_domain),
    "abs": _Function("abs(number)", 1, 1, _fn_abs),
    "min": _Function("min(a, b, ...)", 1, None, _fn_min),
    "max": _Function("max(a, b, ...)", 1, None, _fn_max),
    "round": _Function("round(number, digits=0)", 1, 2, _fn_round),
}

RULE_FUNCTIONS: Final[tuple[str, ...]] = tuple(_FUNCTIONS)
"""Names of the functions that rules may call."""

_BOOL_NAMES: Final = {
    "true": "True",
    "false": "False",
    "null": "None",
    "none": "None",
    "nil": "None",
}


# --------------------------------------------------------------------------
# Input preparation and parsing


def _prepare(expression: object, mode: _Mode) -> str:
    if not isinstance(expression, str):
        raise EvaluationError(
            f"The expression must be text (a string), got {_describe(expression)}."
            f" {mode.hint}"
        )
    if "\x00" in expression:
        raise EvaluationError(
            "The expression contains a null byte. Remove it and write a plain "
            "expression."
        )
    if mode.rules:
        text = expression.translate(_RULE_SPACES).strip()
    else:
        text = expression.translate(_FULLWIDTH).strip()
        if text.endswith("=") and not text.endswith(("==", "<=", ">=", "!=")):
            text = text[:-1].rstrip()
    if not text:
        example = 'amount > 100 and currency == "EUR"' if mode.rules else "(2 + 3) * 4"
        raise EvaluationError(f"The expression is empty. Write one, e.g. {example}.")
    if not mode.rules and "#" in text:
        raise EvaluationError(f"Comments (#) are not allowed. {mode.hint}")
    if len(text) > mode.max_length:
        raise EvaluationError(
            f"The expression is too long ({len(text)} characters; the limit is "
            f"{mode.max_length}). Split it into smaller steps."
        )
    for char in text:
        if unicodedata.category(char) == "Cc":
            if char in "\n\r":
                raise EvaluationError(
                    "Write the expression on a single line. " + mode.hint
                )
            raise EvaluationError(
                f"The expression contains a control character ({char!r}). Remove it."
            )
    return text


def _syntax_hints(text: str, mode: _Mode) -> list[str]:
    hints: list[str] = []
    if mode.rules:
        if "&&" in text or "||" in text:
            hints.append("Write 'and' / 'or' instead of '&&' / '||'.")
        if "!" in text.replace("!=", ""):
            hints.append("Write 'not' instead of '!'.")
        bare = text
        for op in ("==", "!=", "<=", ">="):
            bare = bare.replace(op, "")
        if "=" in bare:
            hints.append("Use '==' to compare, not '='.")
    else:
        if "%" in text:
            hints.append("For a percentage write a fraction, e.g. 50 * 20 / 100.")
        if "=" in text:
            hints.append("Do not write '=' or an answer; write only the expression.")
        if any(c in text for c in "xX"):
            hints.append("Use * for multiplication, not x.")
        if "," in text:
            hints.append("Do not use commas: write 1000 not 1,000 and 1.5 not 1,5.")
    return hints


def _syntax_message(text: str, exc: SyntaxError, mode: _Mode) -> str:
    detail = (exc.msg or "invalid syntax").strip()
    for marker in (". Perhaps", ". Maybe", ". Did you mean", "? Did you"):
        cut = detail.find(marker)
        if cut != -1:
            detail = detail[:cut]
    detail = detail.rstrip(". ")
    where = f" at column {exc.offset}" if exc.offset else ""
    if detail.lower() == "invalid syntax":
        parts = [f"Invalid syntax{where}."]
    else:
        parts = [f"Invalid syntax{where}: {detail}."]
    parts.extend(_syntax_hints(text, mode))
    parts.append(mode.hint)
    return " ".join(parts)


@lru_cache(maxsize=512)
def _parse(text: str, mode: _Mode) -> ast.Expression:
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise EvaluationError(_syntax_message(text, exc, mode)) from None
    except (RecursionError, MemoryError):
        raise EvaluationError(
            "The expression is nested too deeply or is too complex. Simplify it."
        ) from None
    except (ValueError, OverflowError) as exc:
        raise EvaluationError(
            f"The expression could not be parsed ({_short(str(exc), 80)}). " + mode.hint
        ) from None
    _check_tree(tree, text, mode)
    return tree


# --------------------------------------------------------------------------
# Whitelist and limits


def _check_tree(tree: ast.Expression, text: str, mode: _Mode) -> None:
    """Check the whole tree iteratively (no recursion on untrusted depth)."""
    body = tree.body
    if mode.rules and isinstance(body, ast.Tuple | ast.List | ast.Set):
        raise EvaluationError(
            "A rule must be a single condition, not a list or several "
            "comma-separated values. Combine conditions with 'and' / 'or'."
        )
    stack: list[tuple[ast.expr, int]] = [(body, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise EvaluationError(
                f"The expression is too complex (more than {MAX_NODES} parts). "
                "Split it into smaller steps."
            )
        if depth > MAX_DEPTH:
            raise EvaluationError(
                f"The expression is nested too deeply (more than {MAX_DEPTH} "
                "levels). Simplify it."
            )
        _check_node(node, text, mode)
        children = [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)]
        if isinstance(node, ast.Call):
            children = list(node.args)  # the callee was checked by _check_call
        for child in reversed(children):
            flat = isinstance(node, ast.BinOp) and child is node.left
            stack.append((child, depth if flat else depth + 1))


def _check_node(node: ast.expr, text: str, mode: _Mode) -> None:
    hint = mode.hint
    if isinstance(node, ast.Constant):
        _check_constant(node, text, mode)
    elif isinstance(node, ast.BinOp):
        if not isinstance(node.op, _ARITH_OPS):
            raise EvaluationError(_binop_message(node, text, mode))
    elif isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.Invert):
            raise EvaluationError(f"The operator ~ is not supported. {hint}")
        if isinstance(node.op, ast.Not) and not mode.rules:
            raise EvaluationError(f"'not' is not allowed here. {hint}")
    elif isinstance(node, ast.Call):
        _check_call(node, text, mode)
    elif isinstance(node, ast.Name):
        _check_name(node, text, mode)
    elif isinstance(node, ast.Compare):
        if not mode.rules:
            raise EvaluationError(
                f"Comparisons are not allowed: '{_snippet(text, node)}'. "
                f"Compute a number instead. {hint}"
            )
        for op in node.ops:
            if isinstance(op, ast.Is | ast.IsNot):
                raise EvaluationError(
                    "'is' and 'is not' are not supported. Use == or != "
                    "instead, e.g. x == None."
                )
    elif isinstance(node, ast.BoolOp):
        if not mode.rules:
            raise EvaluationError(
                f"'and' / 'or' are not allowed: '{_snippet(text, node)}'. {hint}"
            )
    elif isinstance(node, ast.Tuple | ast.List):
        if not mode.rules:
            raise EvaluationError(
                f"Write a single expression: commas and lists are not allowed "
                f"('{_snippet(text, node)}'). Write 1000 not 1,000 and 1.5 not "
                f"1,5. {hint}"
            )
    else:
        what = _FORBIDDEN_NODES.get(type(node), f"'{type(node).__name__}' is")
        raise EvaluationError(f"{what} not allowed: '{_snippet(text, node)}'. {hint}")


def _binop_message(node: ast.BinOp, text: str, mode: _Mode) -> str:
    op = node.op
    hint = mode.hint
    snippet = _snippet(text, node)
    if isinstance(op, ast.Pow):
        return (
            f"The power operator ** is not supported ('{snippet}'). Write the "
            f"multiplication out instead, e.g. 2*2*2 for 2**3. {hint}"
        )
    if isinstance(op, ast.BitXor):
        return (
            f"The operator ^ is not supported ('{snippet}'). For a power write "
            f"the multiplication out, e.g. 2*2*2 for 2 to the power 3. {hint}"
        )
    if isinstance(op, ast.FloorDiv):
        return f"Floor division // is not supported ('{snippet}'). Use / instead."
    if isinstance(op, ast.Mod):
        return (
            f"The % operator is not supported ('{snippet}'). For a percentage "
            f"write a fraction, e.g. 50 * 20 / 100 for 20% of 50. {hint}"
        )
    symbol = _OP_SYMBOLS.get(type(op), type(op).__name__)
    if mode.rules and isinstance(op, ast.BitAnd | ast.BitOr):
        word = "and" if isinstance(op, ast.BitAnd) else "or"
        return (
            f"The operator {symbol} is not supported ('{snippet}'). "
            f"Write '{word}' to combine conditions."
        )
    return f"The operator {symbol} is not supported ('{snippet}'). {hint}"


def _check_constant(node: ast.Constant, text: str, mode: _Mode) -> None:
    value = node.value
    hint = mode.hint
    if isinstance(value, bool) or value is None:
        if not mode.rules:
            raise EvaluationError(f"{value!r} is not a number. {hint}")
    elif isinstance(value, int):
        if (
            value.bit_length() > 64
            or len(str(value)) > MAX_INT_LITERAL_DIGITS
            or value > MAX_LITERAL_MAGNITUDE
        ):
            raise EvaluationError(
                f"The number {_snippet(text, node)} is too large: numbers may "
                f"have at most {MAX_INT_LITERAL_DIGITS} digits (at most 1e15)."
            )
    elif isinstance(value, float):
        if not math.isfinite(value) or abs(value) > MAX_LITERAL_MAGNITUDE:
            raise EvaluationError(
                f"The number {_snippet(text, node)} is too large: numbers may be "
                "at most 1e15 in magnitude."
            )
    elif isinstance(value, complex):
        raise EvaluationError(
            f"Complex numbers such as '{_snippet(text, node)}' are not supported. "
            + hint
        )
    elif isinstance(value, str):
        if not mode.rules:
            raise EvaluationError(
                f"Text is not allowed: {_snippet(text, node)}. Write numbers "
                f"without quotes. {hint}"
            )
        if len(value) > MAX_STRING_LITERAL_LENGTH:
            raise EvaluationError(
                f"A quoted text is too long ({len(value)} characters; the limit "
                f"is {MAX_STRING_LITERAL_LENGTH})."
            )
    elif isinstance(value, bytes):
        raise EvaluationError(
            f"Byte strings are not allowed: '{_snippet(text, node)}'. {hint}"
        )
    else:
        raise EvaluationError(f"'{_snippet(text, node)}' is not allowed. {hint}")


def _check_name(node: ast.Name, text: str, mode: _Mode) -> None:
    name = node.id
    if not mode.rules:
        extra = " Use * for multiplication." if name in ("x", "X") else ""
        raise EvaluationError(
            f"Names are not allowed: '{_short(name)}'.{extra} {mode.hint}"
        )
    if name in _FUNCTIONS:
        raise EvaluationError(
            f"'{name}' is a function: call it with parentheses, e.g. "
            f"{_FUNCTIONS[name].signature}."
        )
    if name.lower() in _BOOL_NAMES:
        raise EvaluationError(
            f"Unknown name '{name}'. Write {_BOOL_NAMES[name.lower()]} (capitalised)."
        )


def _check_call(node: ast.Call, text: str, mode: _Mode) -> None:
    func = node.func
    snippet = _snippet(text, node)
    if isinstance(func, ast.Attribute):
        if mode.rules:
            if func.attr in _FUNCTIONS:
                args = [_snippet(text, func.value)]
                args += [_snippet(text, a) for a in node.args]
                suggestion = f"{func.attr}({', '.join(args)})"
                raise EvaluationError(
                    f"Method calls are not allowed: '{snippet}'. Call the "
                    f"function instead: {_short(suggestion, 120)}"
                )
            raise EvaluationError(
                f"Method calls are not allowed: '{snippet}'. Available "
                f"functions: {', '.join(_FUNCTIONS)}."
            )
        raise EvaluationError(f"Method calls are not allowed: '{snippet}'. {mode.hint}")
    if not mode.rules:
        raise EvaluationError(
            f"Function calls are not allowed: '{snippet}'. {mode.hint}"
        )
    if not isinstance(func, ast.Name):
        raise EvaluationError(
            f"Only the listed functions can be called, by name: '{snippet}'. "
            f"Available functions: {', '.join(_FUNCTIONS)}."
        )
    spec = _FUNCTIONS.get(func.id)
    if spec is None:
        raise EvaluationError(
            f"Unknown function '{_short(func.id)}'. Available functions: "
            f"{', '.join(_FUNCTIONS)}."
        )
    if node.keywords:
        raise EvaluationError(
            f"Keyword arguments are not allowed in {func.id}(): pass arguments "
            f"by position, e.g. {spec.signature}."
        )
    if any(isinstance(arg, ast.Starred) for arg in node.args):
        raise EvaluationError(
            f"Star-unpacking is not allowed in {func.id}(): {spec.signature}."
        )
    count = len(node.args)
    if count < spec.min_args or (spec.max_args is not None and count > spec.max_args):
        raise EvaluationError(
            f"Wrong number of arguments in '{snippet}': use {spec.signature}."
        )


# --------------------------------------------------------------------------
# Evaluation


def _coerce_variable(name: str, value: object) -> object:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Decimal):
        try:
            if value.is_finite() and value == value.to_integral_value():
                return int(value)
            return float(value)
        except (ArithmeticError, ValueError):
            raise EvaluationError(
                f"Argument '{name}' is not a usable number."
            ) from None
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, dict | set | frozenset):
        return value
    raise EvaluationError(
        f"Argument '{name}' has an unsupported type ({type(value).__name__}); "
        "rules work with text, numbers, booleans, None, lists and dicts."
    )


_Ordered = TypeVar("_Ordered", int | float, str)


def _order(op: ast.cmpop, left: _Ordered, right: _Ordered) -> bool:
    if isinstance(op, ast.Lt):
        return left < right
    if isinstance(op, ast.LtE):
        return left <= right
    if isinstance(op, ast.Gt):
        return left > right
    return left >= right


class _Evaluator:
    def __init__(self, text: str, variables: Mapping[str, object]) -> None:
        self._text = text
        self._variables = variables

    def eval(self, node: ast.expr) -> object:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.BinOp):
            return self._binop(node)
        if isinstance(node, ast.UnaryOp):
            return self._unary(node)
        if isinstance(node, ast.Name):
            return _coerce_variable(node.id, self._variables.get(node.id))
        if isinstance(node, ast.BoolOp):
            return self._boolop(node)
        if isinstance(node, ast.Compare):
            return self._compare(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.List | ast.Tuple):
            return [self.eval(element) for element in node.elts]
        raise EvaluationError(  # unreachable after _check_tree
            f"'{_snippet(self._text, node)}' is not allowed."
        )

    def _binop(self, node: ast.BinOp) -> object:
        # Walk the left spine iteratively so that long flat chains such as
        # 1 + 2 + 3 + ... do not recurse.
        chain: list[ast.BinOp] = []
        current: ast.expr = node
        while isinstance(current, ast.BinOp):
            chain.append(current)
            current = current.left
        value = self.eval(current)
        for binop in reversed(chain):
            value = self._arith(binop, value, self.eval(binop.right))
        return value

    def _arith(self, node: ast.BinOp, left: object, right: object) -> object:
        if left is None or right is None:
            return None
        if not (_is_number(left) and _is_number(right)):
            symbol = _OP_SYMBOLS.get(type(node.op), "?")
            raise EvaluationError(
                f"'{symbol}' needs two numbers, got {_describe(left)} and "
                f"{_describe(right)} in '{_snippet(self._text, node)}'."
            )
        op = node.op
        result: int | float
        if isinstance(op, ast.Add):
            result = left + right
        elif isinstance(op, ast.Sub):
            result = left - right
        elif isinstance(op, ast.Mult):
            result = left * right
        elif isinstance(op, ast.Div):
            if right == 0:
                raise DivisionByZero()
            if isinstance(left, int) and isinstance(right, int):
                quotient, remainder = divmod(left, right)
                result = quotient if remainder == 0 else left / right
            else:
                result = left / right
        else:  # unreachable after _check_tree
            raise EvaluationError("Unsupported operator.")
        return _check_result(result)

    def _unary(self, node: ast.UnaryOp) -> object:
        value = self.eval(node.operand)
        if isinstance(node.op, ast.Not):
            return not value
        if value is None:
            return None
        if not _is_number(value):
            symbol = "-" if isinstance(node.op, ast.USub) else "+"
            raise EvaluationError(
                f"Unary {symbol} needs a number, got {_describe(value)} in "
                f"'{_snippet(self._text, node)}'."
            )
        return -value if isinstance(node.op, ast.USub) else +value

    def _boolop(self, node: ast.BoolOp) -> object:
        is_and = isinstance(node.op, ast.And)
        value: object = None
        for operand in node.values:
            value = self.eval(operand)
            if bool(value) != is_and:
                return value
        return value

    def _compare(self, node: ast.Compare) -> bool:
        left = self.eval(node.left)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = self.eval(comparator)
            if not self._compare_pair(node, op, left, right):
                return False
            left = right
        return True

    def _compare_pair(
        self, node: ast.Compare, op: ast.cmpop, left: object, right: object
    ) -> bool:
        if isinstance(op, ast.Eq):
            return left == right
        if isinstance(op, ast.NotEq):
            return left != right
        if isinstance(op, ast.In | ast.NotIn):
            found = self._contains(node, left, right)
            return found if isinstance(op, ast.In) else not found
        if left is None or right is None:
            return False
        if _is_number(left) and _is_number(right):
            return _order(op, left, right)
        if isinstance(left, str) and isinstance(right, str):
            return _order(op, left, right)
        symbol = _OP_SYMBOLS.get(type(op), "?")
        raise EvaluationError(
            f"Cannot compare {_describe(left)} with {_describe(right)} using "
            f"'{symbol}' in '{_snippet(self._text, node)}'. Both sides must be "
            "numbers, or both must be text."
        )

    def _contains(self, node: ast.Compare, item: object, container: object) -> bool:
        if item is None or container is None:
            return False
        if isinstance(container, str):
            if not isinstance(item, str):
                raise EvaluationError(
                    f"Cannot look for {_describe(item)} inside text in "
                    f"'{_snippet(self._text, node)}': both sides of 'in' must be "
                    "text, or the right side must be a list."
                )
            return item in container
        if isinstance(container, list | tuple):
            return any(element == item for element in container)
        if isinstance(container, dict | set | frozenset):
            try:
                return item in container
            except TypeError:
                return False
        raise EvaluationError(
            f"'in' needs a list or text on the right, got {_describe(container)} "
            f"in '{_snippet(self._text, node)}'."
        )

    def _call(self, node: ast.Call) -> object:
        assert isinstance(node.func, ast.Name)  # guaranteed by _check_call
        spec = _FUNCTIONS[node.func.id]
        args = [self.eval(arg) for arg in node.args]
        return spec.impl(args)


def _guarded(action: Callable[[], _T]) -> _T:
    """Run ``action`` turning every unexpected failure into EvaluationError."""
    try:
        return action()
    except EvaluationError:
        raise
    except ZeroDivisionError:
        raise DivisionByZero() from None
    except OverflowError:
        raise EvaluationError("The result is too large. Use smaller numbers.") from None
    except (RecursionError, MemoryError):
        raise EvaluationError(
            "The expression is too complex to evaluate. Simplify it."
        ) from None
    except (ArithmeticError, TypeError, ValueError) as exc:
        raise EvaluationError(
            f"The expression could not be evaluated ({_short(str(exc), 80)})."
        ) from None


# --------------------------------------------------------------------------
# Public API


def evaluate_arithmetic(expression: str) -> int | float:
    """Evaluate an arithmetic expression such as ``"128 * 6 + 320"``.

    Only int and float literals, binary ``+ - * /``, unary ``+ -`` and
    parentheses are allowed. Full-width operators (＋ － × ÷ （ ）, the minus
    sign −) are accepted. Integer results stay ``int``; ``/`` between integers
    returns an ``int`` when the division is exact.

    Raises:
        EvaluationError: with a message that says what to write instead, for
            any disallowed syntax, exceeded limit or oversized result.
        DivisionByZero: (a subclass of EvaluationError) on division by zero.
    """

    def run() -> int | float:
        text = _prepare(expression, _ARITHMETIC)
        tree = _parse(text, _ARITHMETIC)
        result = _Evaluator(text, {}).eval(tree.body)
        if not _is_number(result):  # unreachable after _check_tree
            raise EvaluationError(f"The result is not a number. {_ARITHMETIC_HINT}")
        if isinstance(result, float) and result == 0:
            result = 0.0  # never report -0.0
        return result

    return _guarded(run)


def validate_rule(expression: str, known_names: Sequence[str] | None = None) -> None:
    """Check a rule's syntax, whitelist and limits without evaluating it.

    Used when a rule is saved. Type errors that depend on argument values are
    only found by ``evaluate_rule``. When ``known_names`` is given (the tool's
    argument names), a name outside it is reported as unknown, which catches
    typos that would otherwise silently evaluate to ``None``.

    Raises:
        EvaluationError: with a message suitable for showing on a form field.
    """

    def run() -> None:
        text = _prepare(expression, _RULE)
        tree = _parse(text, _RULE)
        if known_names is None:
            return
        allowed = set(known_names)
        callees = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Name)
                and id(node) not in callees
                and node.id not in allowed
            ):
                listed = ", ".join(sorted(allowed)[:30]) or "(none)"
                raise EvaluationError(
                    f"Unknown argument '{_short(node.id)}'. Known arguments: {listed}."
                )

    _guarded(run)


def evaluate_rule(expression: str, variables: Mapping[str, object]) -> bool:
    """Evaluate an approval rule such as ``amount > 100 and currency == "EUR"``.

    Names are looked up in ``variables``; a missing name is ``None``, and
    ordering comparisons, ``in`` and the text predicates involving ``None`` are
    ``False`` (see the module docstring for the full semantics). The result is
    coerced to ``bool``.

    Raises:
        EvaluationError: for syntax or whitelist violations, exceeded limits
            and type errors such as ``"a" > 1``; callers should fail closed.
    """

    def run() -> bool:
        text = _prepare(expression, _RULE)
        tree = _parse(text, _RULE)
        return bool(_Evaluator(text, variables).eval(tree.body))

    return _guarded(run)
