"""Tool arguments against each built-in tool's schema and handler, under Hypothesis.

What a model sends goes the way a run takes it: the argument text is parsed and
validated against the tool's schema (a refusal is an observation for the model),
then the handler runs through the real executor on the real database. A call
ends as a result or as the tool's own error (``ToolError``) — never as a crash
of the handler (``exception``), nor as a result that is not JSON data.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.execution import Executor, observation_text
from engine.planning import InvalidArguments, parse_arguments, validate_arguments
from engine.spec import CallContext, ErrorClass
from registry.models import Tool
from registry.services import handler_for, spec_for
from tests.fuzz.strategies import argument_values, fuzz_settings, text

pytestmark = pytest.mark.django_db(transaction=True)

BUILT_IN = ["calculate", "search_notes", "create_ticket", "send_email"]


@pytest.fixture
def executor() -> Iterator[Executor]:
    executor = Executor(max_threads=2, max_abandoned=2)
    yield executor
    executor.shutdown()


def _dumps(value: Any, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)


@st.composite
def argument_text(draw: Any, parameters: dict[str, Any]) -> str:
    """Argument text a model might send for a tool with these ``parameters``."""
    names = list(parameters.get("properties", {}))
    shaped = st.fixed_dictionaries(
        {name: st.one_of(text, text, argument_values) for name in names},
        optional={"extra": argument_values},
    )
    partial = st.dictionaries(st.sampled_from([*names, "x"]), argument_values)
    value = draw(st.one_of(shaped, shaped, partial, argument_values))
    encoded = draw(st.builds(_dumps, st.just(value), st.booleans()))
    return draw(
        st.one_of(
            st.just(encoded),
            st.just(encoded),
            st.integers(0, max(0, len(encoded) - 1)).map(lambda n: encoded[:n]),
            st.text(max_size=80),
            st.just(encoded.replace('"', "'")),
            st.sampled_from(["NaN", "-Infinity", "1e400"]).map(
                lambda n: encoded.replace('""', n, 1)
            ),
            st.integers(1, 5000).map(lambda n: '{"a": ' * n + "1" + "}" * n),
        )
    )


@pytest.mark.parametrize("name", BUILT_IN)
@fuzz_settings(50)
@given(data=st.data())
def test_any_arguments_end_as_a_refusal_a_result_or_the_tools_own_error(
    name: str, data: Any, demo: Any, executor: Executor
) -> None:
    tool = Tool.objects.get(name=name)
    spec, handler = spec_for(tool), handler_for(tool)
    assert handler is not None
    raw = data.draw(argument_text(spec.parameters), label="raw_arguments")
    try:
        arguments = parse_arguments(raw)
        validate_arguments(spec.parameters, arguments)
    except InvalidArguments as refusal:
        assert str(refusal)  # the model is told what to send instead
        return
    context = CallContext(
        task_id="",
        seq=1,
        idempotency_key=f"fuzz:{uuid.uuid4()}",
        tool=spec,
        deadline=0.0,
    )

    result = executor.run(spec, handler, arguments, context)

    assert result.ok or result.error_class == ErrorClass.TOOL_ERROR, (
        raw,
        result.error_class,
        result.error,
    )
    if result.ok:
        json.loads(observation_text(result.value, spec.max_result_chars))
    else:
        assert result.error
