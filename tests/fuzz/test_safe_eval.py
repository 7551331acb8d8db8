"""The calculator's evaluator and the approval-rule evaluator, under Hypothesis.

Engine only, no Django: random and generated expressions never raise anything
but ``EvaluationError``, never take long, and compute what arithmetic says;
approval rules over random arguments either decide or fail closed (approval).
"""

from __future__ import annotations

import math
import time
from fractions import Fraction
from typing import Any, NamedTuple

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from engine.planning import decide
from engine.safe_eval import (
    MAX_RESULT_MAGNITUDE,
    RULE_FUNCTIONS,
    DivisionByZero,
    EvaluationError,
    evaluate_arithmetic,
    evaluate_rule,
    validate_rule,
)
from engine.spec import ApprovalMode, Decision, Risk, ToolSpec
from tests.fuzz.strategies import argument_values, fuzz_settings, text

#: Far more than any accepted expression needs; a call past it is a hang.
SLOW_S = 2.0


def timed(call: Any, *args: Any) -> tuple[Any, BaseException | None]:
    """Call, and return (result, EvaluationError or None); fail on anything
    else, or when the call takes longer than ``SLOW_S``."""
    started = time.monotonic()
    result: Any = None
    error: BaseException | None = None
    try:
        result = call(*args)
    except EvaluationError as exc:
        error = exc
        assert str(exc), "an EvaluationError says what is wrong"
    elapsed = time.monotonic() - started
    assert elapsed < SLOW_S, f"{call.__name__}{args!r:.200} took {elapsed:.2f} s"
    return result, error


# -- the calculator -------------------------------------------------------------

ARITHMETIC_CHARS = "0123456789+-*/(). eE_=#%,;'\"xX∞×÷（）－−＋\u3000\t\n\x00"

arithmetic_noise = st.one_of(
    st.text(alphabet=ARITHMETIC_CHARS, max_size=600),
    st.text(max_size=700),
    st.builds(
        lambda n, s: s * n, st.integers(1, 400), st.sampled_from(["(", "-", "1+"])
    ),
)


@fuzz_settings(200)
@given(expression=arithmetic_noise)
def test_any_text_is_a_number_or_an_evaluation_error(expression: str) -> None:
    result, error = timed(evaluate_arithmetic, expression)
    if error is None:
        assert isinstance(result, int | float) and not isinstance(result, bool)
        assert math.isfinite(result) and abs(result) <= MAX_RESULT_MAGNITUDE


class Expr(NamedTuple):
    """A generated expression: its text, its exact value (None: it divides by
    zero), the largest magnitude any step reaches, whether the evaluator computes
    it exactly (every division exact, so integers throughout), and whether float
    rounding could change the outcome (a division by a rounded near-zero)."""

    text: str
    value: Fraction | None
    peak: Fraction
    exact: bool = True
    unsure: bool = False


def _leaf(n: int) -> Expr:
    return Expr(str(n), Fraction(n), Fraction(abs(n)))


def _combine(op: str, left: Expr, right: Expr) -> Expr:
    value: Fraction | None = None
    exact = left.exact and right.exact
    unsure = left.unsure or right.unsure
    if left.value is not None and right.value is not None:
        if op == "+":
            value = left.value + right.value
        elif op == "-":
            value = left.value - right.value
        elif op == "*":
            value = left.value * right.value
        else:
            if not right.exact and abs(right.value) <= 1e-6 * max(1, right.peak):
                unsure = True
            if right.value != 0:
                value = left.value / right.value
                exact = exact and value.denominator == 1
    peak = max(left.peak, right.peak, abs(value) if value is not None else 0)
    return Expr(f"({left.text} {op} {right.text})", value, peak, exact, unsure)


def _negate(inner: Expr) -> Expr:
    value = -inner.value if inner.value is not None else None
    return inner._replace(text=f"-({inner.text})", value=value)


expressions = st.recursive(
    st.integers(-(10**6), 10**6).map(_leaf),
    lambda children: (
        st.builds(_combine, st.sampled_from("+-*/"), children, children)
        | children.map(_negate)
    ),
    max_leaves=16,
)


@fuzz_settings(150)
@given(expression=expressions)
def test_generated_arithmetic_computes_what_arithmetic_says(expression: Expr) -> None:
    assume(not expression.unsure)
    # Float rounding may cross the limit where the exact values do not.
    near = 0.999 * MAX_RESULT_MAGNITUDE < expression.peak < 1.001 * MAX_RESULT_MAGNITUDE
    assume(expression.exact or not near)
    result, error = timed(evaluate_arithmetic, expression.text)
    if expression.value is None:
        assert isinstance(error, DivisionByZero), (expression, result)
    elif expression.peak > MAX_RESULT_MAGNITUDE:
        assert error is not None, (expression, result)
    else:
        assert error is None, (expression, error)
        tolerance = 1e-9 * max(1.0, float(expression.peak))
        assert abs(Fraction(result) - expression.value) <= tolerance, expression
        if expression.exact:
            assert result == expression.value and isinstance(result, int)


# -- approval rules -------------------------------------------------------------

NAMES = ["amount", "to", "currency", "tags", "missing", "x"]

rule_atoms = st.one_of(
    st.sampled_from(NAMES),
    st.integers(-(10**18), 10**18).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    text.map(repr),
    st.sampled_from(["True", "False", "None", "[]", '["a", 1]', "1e309", "-0.0"]),
)


def _call(name: str, args: list[str]) -> str:
    return f"{name}({', '.join(args)})"


rules = st.recursive(
    rule_atoms,
    lambda children: st.one_of(
        st.builds(
            lambda a, op, b: f"({a} {op} {b})",
            children,
            st.sampled_from(
                ["==", "!=", "<", "<=", ">", ">=", "in", "not in", "and", "or"]
                + ["+", "-", "*", "/", "**", "%", "is", "&"]
            ),
            children,
        ),
        children.map(lambda a: f"(not {a})"),
        children.map(lambda a: f"(-{a})"),
        st.builds(
            _call,
            st.sampled_from([*RULE_FUNCTIONS, "eval", "__import__"]),
            st.lists(children, max_size=3),
        ),
        st.lists(children, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        children.map(lambda a: f"{a}.lower()"),
    ),
    max_leaves=12,
)
rule_noise = st.one_of(rules, st.text(max_size=300), st.just("(" * 300 + ")" * 300))
rule_arguments = st.dictionaries(st.sampled_from(NAMES), argument_values, max_size=6)


@fuzz_settings(200)
@given(rule=rule_noise, arguments=rule_arguments)
def test_a_rule_over_any_arguments_is_true_false_or_an_evaluation_error(
    rule: str, arguments: dict[str, Any]
) -> None:
    _, invalid = timed(validate_rule, rule)
    result, error = timed(evaluate_rule, rule, arguments)
    if error is None:
        assert isinstance(result, bool)
    if invalid is not None:
        # What is refused when the rule is saved never evaluates.
        assert error is not None, (rule, result)


@pytest.mark.parametrize("risk", [Risk.READ_ONLY, Risk.WRITE])
@fuzz_settings(100)
@given(rule=rules, arguments=rule_arguments)
def test_the_approval_policy_asks_a_human_when_a_rule_matches_or_breaks(
    risk: Risk, rule: str, arguments: dict[str, Any]
) -> None:
    spec = ToolSpec(
        name="pay_invoice",
        description="Pay an invoice.",
        parameters={"type": "object"},
        risk=risk,
        approval=ApprovalMode.RULE,
        approval_rule=rule,
    )
    matched, error = timed(evaluate_rule, rule, arguments)

    policy = decide(spec, arguments)

    if error is not None or matched:
        assert policy.decision is Decision.APPROVE, (rule, arguments)
        assert policy.reasons
    else:
        assert policy.decision is Decision.EXECUTE, (rule, arguments)
