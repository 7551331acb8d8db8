"""Hypothesis strategies and settings the fuzz suites share.

Small runs (tens of examples each, no deadline, no example database in the
tree): the suites run in CI on every change, so they look wide, not long.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: ``REACH_FUZZ_SCALE=4 pytest tests/fuzz`` looks longer than CI does (half the
#: counts written beside each suite, so that the whole CI run stays short).
SCALE = float(os.environ.get("REACH_FUZZ_SCALE", "0.5"))


def scaled(examples: int) -> int:
    return max(5, int(examples * SCALE))


def fuzz_settings(examples: int) -> Any:
    """Hypothesis settings for a suite that tries ``examples`` inputs (scaled)."""
    return settings(
        max_examples=scaled(examples),
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )


#: Text as it reaches the product: printable, control characters, NULs, CJK,
#: emoji, and lone surrogates (a JSON ``\ud800`` escape decodes to one).
# (st.characters() leaves surrogates out whatever the range: build them.)
surrogates = st.integers(0xD800, 0xDFFF).map(chr)
text = st.one_of(
    st.text(max_size=40),
    st.text(
        alphabet=st.one_of(st.characters(), surrogates, st.sampled_from("\x00\n\t")),
        max_size=40,
    ),
    st.sampled_from(["", " ", "Redis", "缓存", "128 * 6 + 320", "a@example.com"]),
)

#: Numbers as JSON carries them: small, huge (past 64 bits) and fractional.
numbers = st.one_of(
    st.integers(-(10**6), 10**6),
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=False, allow_infinity=False),
)

#: Any JSON value, a few levels deep.
json_values = st.recursive(
    st.none() | st.booleans() | numbers | text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4)
    ),
    max_leaves=12,
)

#: What a model's decoded arguments may hold (Python's JSON decoder takes NaN
#: and Infinity): JSON values and the non-finite numbers.
argument_values = st.recursive(
    st.none()
    | st.booleans()
    | numbers
    | st.sampled_from([float("nan"), float("inf"), float("-inf")])
    | text,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4)
    ),
    max_leaves=12,
)
