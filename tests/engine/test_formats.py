"""JSON-Schema `format` checks: asserted before a call runs, told to the model."""

from __future__ import annotations

import json

import pytest

from engine.formats import CHECKED_FORMATS, FORMATS
from engine.planning import InvalidArguments, Planner, validate_arguments
from engine.spec import ErrorClass, Risk, StepStatus, ToolCall
from tests.support.engine_doubles import FakeModel, advanced, spec, tool_steps
from tests.support.openai_tools import object_schema
from tests.support.replies import text, tool_call

VALID = {
    "date": ["2025-03-14", "2024-02-29", "0001-01-01"],
    "date-time": [
        "2025-03-14T09:30:00Z",
        "2025-03-14T09:30:00.123+08:00",
        "2025-03-14t09:30:00z",
        "2016-12-31T23:59:60Z",
    ],
    "time": ["09:30:00Z", "23:59:59.5-05:00", "00:00:00+14:00"],
    "duration": ["P3D", "PT1H30M", "P2W", "P1Y2M3DT4H5M6S", "PT0S"],
    "email": ["name@example.com", "first.last+tag@sub.example.org", "x@[192.0.2.1]"],
    "hostname": ["example.com", "a-b.example", "localhost"],
    "ipv4": ["192.0.2.10", "0.0.0.0", "255.255.255.255"],
    "ipv6": ["2001:db8::1", "::1", "::ffff:192.0.2.1"],
    "uri": [
        "https://example.com/a?b=1#c",
        "mailto:a@example.com",
        "urn:isbn:1",
        "http://[::1]:80/",
    ],
    "uri-reference": ["/docs/a?b=1", "https://example.com", "#top", ""],
    "uuid": [
        "123e4567-e89b-12d3-a456-426614174000",
        "00000000-0000-0000-0000-000000000000",
    ],
}
INVALID = {
    "date": [
        "明天",
        "tomorrow",
        "2025-02-30",
        "2025-13-01",
        "25-03-14",
        "2025-3-14",
        "2025-03-14T00:00:00Z",
        "２０２５-０３-１４",
        " 2025-03-14",
    ],
    "date-time": [
        "2025-03-14",
        "2025-03-14T09:30:00",
        "2025-03-14 09:30:00Z",
        "2025-03-14T25:00:00Z",
        "明天上午九点",
    ],
    "time": [
        "09:30",
        "09:30:00",
        "24:00:00Z",
        "09:60:00Z",
        "9:30:00Z",
        "09:30:00+24:00",
    ],
    "duration": ["P", "PT", "3D", "P1H", "PT1D", "P1W2D", "three days"],
    "email": [
        "x",
        "@example.com",
        "a@",
        "a b@example.com",
        "a@@example.com",
        "a@-bad-.com",
        "a@exa mple.com",
        "李@例子.中国",
    ],
    "hostname": ["-a.com", "a..com", "a_b.com", "", "a" * 64 + ".com"],
    "ipv4": ["256.0.0.1", "1.2.3", "01.2.3.4", "1.2.3.4.5", "١.٢.٣.٤", "::1"],
    "ipv6": ["2001:db8::g", "1.2.3.4", "fe80::1%eth0", ":::", "12345::"],
    "uri": [
        "example.com",
        "/relative",
        "http://exa mple.com",
        "https://a.com/%zz",
        "http://例子.中国/",
        "http://a.com/[x]",
    ],
    "uri-reference": ["a b", "%", "http://a.com/\\"],
    "uuid": [
        "123e4567e89b12d3a456426614174000",
        "123e4567-e89b-12d3-a456-42661417400",
        "g23e4567-e89b-12d3-a456-426614174000",
        "{123e4567-e89b-12d3-a456-426614174000}",
    ],
}


def schema_of(name: str) -> dict[str, object]:
    return object_schema({"value": {"type": "string", "format": name}}, ["value"])


def test_the_issue_s_formats_are_all_checked():
    assert {"date", "date-time", "time", "email", "uri", "uuid", "ipv4", "ipv6"} <= (
        CHECKED_FORMATS
    )
    assert set(VALID) == set(INVALID) == set(FORMATS)


@pytest.mark.parametrize(
    ("name", "value"), [(n, v) for n, values in VALID.items() for v in values]
)
def test_a_valid_value_passes_its_format(name, value):
    validate_arguments(schema_of(name), {"value": value})


@pytest.mark.parametrize(
    ("name", "value"), [(n, v) for n, values in INVALID.items() for v in values]
)
def test_an_invalid_value_fails_its_format_and_says_what_was_expected(name, value):
    with pytest.raises(InvalidArguments) as raised:
        validate_arguments(schema_of(name), {"value": value})
    assert raised.value.error_class == ErrorClass.INVALID_ARGUMENTS
    assert f"is not a valid {name}: expected {FORMATS[name].expected}" in str(
        raised.value
    )


def test_tomorrow_in_chinese_for_a_date_says_expected_yyyy_mm_dd():
    with pytest.raises(InvalidArguments) as raised:
        validate_arguments(schema_of("date"), {"value": "明天"})
    message = str(raised.value)
    assert "'明天' is not a valid date: expected YYYY-MM-DD" in message
    # The hint lists the parameter with its format.
    assert "value (string, date)" in message


def test_a_value_of_another_type_is_refused_by_type_not_by_format():
    with pytest.raises(InvalidArguments) as raised:
        validate_arguments(schema_of("date"), {"value": 20250314})
    assert "is not of type 'string'" in str(raised.value)
    assert "expected YYYY-MM-DD" not in str(raised.value)


def test_a_format_nothing_checks_stays_an_annotation():
    validate_arguments(
        object_schema({"value": {"type": "string", "format": "phone"}}),
        {"value": "anything"},
    )


def test_formats_nested_in_arrays_and_objects_are_checked():
    schema = object_schema(
        {
            "days": {"type": "array", "items": {"type": "string", "format": "date"}},
            "guest": object_schema({"email": {"type": "string", "format": "email"}}),
        }
    )
    with pytest.raises(InvalidArguments) as raised:
        validate_arguments(
            schema, {"days": ["2025-03-14", "next week"], "guest": {"email": "nobody"}}
        )
    message = str(raised.value)
    assert "days/1: 'next week' is not a valid date" in message
    assert "guest/email: 'nobody' is not a valid email" in message


def booking_spec():
    return spec(
        "book_room",
        risk=Risk.WRITE,
        parameters=object_schema(
            {"day": {"type": "string", "format": "date"}},
            ["day"],
            additionalProperties=False,
        ),
    )


def test_planning_fails_a_call_with_a_bad_date_before_the_policy_decides():
    planner = Planner({"book_room": booking_spec()})

    step = planner.plan_call(
        ToolCall(
            call_id="c0", name="book_room", raw_arguments='{"day": "明天"}', index=0
        )
    )

    assert step.status is StepStatus.FAILED
    assert step.error_class == ErrorClass.INVALID_ARGUMENTS
    assert "expected YYYY-MM-DD" in (step.error or "")
    assert step.arguments is None


def test_a_write_with_a_bad_date_never_runs_and_the_model_is_told_why():
    booked: list[dict[str, object]] = []

    def book(arguments, context):
        booked.append(arguments)
        return {"booked": arguments["day"]}

    model = FakeModel(
        [
            tool_call("book_room", {"day": "明天"}),
            tool_call("book_room", {"day": "2025-03-15"}),
            text("Booked for 2025-03-15."),
        ]
    )
    j = advanced(model, {"book_room": (booking_spec(), book)})

    first, second = tool_steps(j)
    assert first.status is StepStatus.FAILED
    assert first.error_class == ErrorClass.INVALID_ARGUMENTS
    assert second.status is StepStatus.SUCCEEDED
    assert booked == [{"day": "2025-03-15"}]
    observation = json.loads(model.requests[1][-1]["content"])
    assert "expected YYYY-MM-DD" in observation["error"]
