"""Description lint: each rule, the demo tools, the command and the admin."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command

from reach_site.demo import DEMO_TOOLS
from registry.lint import Rule, lint_tool, lint_tools
from registry.models import Tool
from registry.services import tool_save

GOOD_DESCRIPTION = (
    "Look up one order by its number. Returns the order's status and its total."
)


def tool(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "get_order",
        "description": GOOD_DESCRIPTION,
        "parameters": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "description": "e.g. A-1001"}
            },
        },
        "risk": "read_only",
    }
    return base | fields


def rules(definition: dict[str, Any]) -> list[Rule]:
    return [w.rule for w in lint_tool(definition)]


def messages(definition: dict[str, Any]) -> str:
    return " | ".join(w.message for w in lint_tool(definition))


def with_parameter(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return tool(parameters={"type": "object", "properties": {name: schema}})


def test_a_well_described_tool_has_no_warnings():
    assert lint_tool(tool()) == []


def test_the_demo_tools_lint_clean():
    assert lint_tools(DEMO_TOOLS) == {d["name"]: [] for d in DEMO_TOOLS}


@pytest.mark.parametrize("name", ["orders", "customer_lookup", "the_order"])
def test_a_name_that_is_not_verb_noun_is_warned(name):
    assert rules(tool(name=name)) == [Rule.NAME]


def test_a_bare_verb_names_its_action():
    assert rules(tool(name="calculate")) == []


def test_a_short_description_is_warned():
    assert rules(tool(description="Gets an order.")) == [Rule.DESCRIPTION]
    assert "short (14 characters)" in messages(tool(description="Gets an order."))


@pytest.mark.parametrize(
    "description",
    [
        "Does stuff with orders in the order system, for the support team.",
        "Handles orders: whatever the support team needs to do with an order.",
        "Order utility for the support team, covering the order system in full.",
    ],
)
def test_a_vague_description_is_warned(description):
    assert rules(tool(description=description)) == [Rule.DESCRIPTION]
    assert "vague" in messages(tool(description=description))


def test_a_parameter_without_a_description_is_warned():
    definition = with_parameter("order_id", {"type": "string"})
    assert rules(definition) == [Rule.PARAMETER]
    assert "“order_id” has no description" in messages(definition)


def test_nested_parameters_are_checked_too():
    definition = with_parameter(
        "customer",
        {
            "type": "object",
            "description": "Who ordered",
            "properties": {"email": {"type": "string"}},
        },
    )
    assert "“customer.email” has no description" in messages(definition)


@pytest.mark.parametrize(
    "name", ["date", "due_date", "start_time", "created_at", "deadline"]
)
def test_a_date_parameter_without_a_format_is_warned(name):
    definition = with_parameter(name, {"type": "string", "description": "When"})
    assert rules(definition) == [Rule.FORMAT]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "format": "date", "description": "The day"},
        {"type": "string", "format": "date-time", "description": "When"},
        {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$", "description": "HH:MM"},
        {"type": "integer", "description": "When, as Unix epoch seconds"},
    ],
)
def test_a_date_parameter_with_a_checked_format_is_fine(schema):
    assert rules(with_parameter("due_date", schema)) == []


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "description": "The day, YYYY-MM-DD"},
        {"type": "string", "description": "When, as ISO 8601 date-time"},
        {"type": "string", "description": "e.g. 2024-05-01"},
    ],
)
def test_a_date_format_named_only_in_the_description_is_warned_as_unchecked(schema):
    definition = with_parameter("due_date", schema)
    assert rules(definition) == [Rule.FORMAT]
    assert "only in the description" in messages(definition)
    assert "refused before the call runs" in messages(definition)


def test_the_format_advice_names_formats_that_are_checked():
    definition = with_parameter("due_date", {"type": "string", "description": "When"})
    assert '"format": "date"' in messages(definition)
    assert "refused before the call runs" in messages(definition)


@pytest.mark.parametrize("name", ["YYYY-MM-DD", "iso8601", "phone"])
def test_a_format_nothing_checks_is_warned(name):
    definition = with_parameter(
        "order_id", {"type": "string", "format": name, "description": "e.g. A-1"}
    )
    assert rules(definition) == [Rule.FORMAT]
    assert f"“{name}”, which nothing checks" in messages(definition)


@pytest.mark.parametrize("name", ["email", "uri", "uuid", "ipv4", "ipv6", "time"])
def test_a_checked_format_on_any_parameter_is_fine(name):
    definition = with_parameter(
        "target", {"type": "string", "format": name, "description": "e.g. x"}
    )
    assert rules(definition) == []


@pytest.mark.parametrize("name", ["amount", "price", "timeout", "max_size", "duration"])
def test_an_amount_without_a_unit_is_warned(name):
    definition = with_parameter(name, {"type": "number", "description": "How much"})
    assert rules(definition) == [Rule.UNIT]


@pytest.mark.parametrize(
    ("name", "description"),
    [
        ("amount", "How much to refund, in EUR"),
        ("price", "The unit price in cents"),
        ("timeout", "How long to wait, in seconds"),
        ("max_size", "The largest upload in MB"),
        ("total_eur", "The order total"),
        ("timeout_s", "How long to wait"),
        ("price", "e.g. $12.50"),
    ],
)
def test_an_amount_with_a_unit_is_fine(name, description):
    assert (
        rules(with_parameter(name, {"type": "number", "description": description}))
        == []
    )


@pytest.mark.parametrize("risk", ["write", "irreversible"])
def test_a_write_that_does_not_say_what_it_changes_is_warned(risk):
    definition = tool(
        name="close_order",
        description="Process an order by its number when the customer is done with it.",
        risk=risk,
    )
    assert rules(definition) == [Rule.CHANGES]


@pytest.mark.parametrize(
    "description",
    [
        "Close an order by its number. Changes: the order's status becomes closed.",
        "Closes an order by its number and sends the customer a receipt.",
    ],
)
def test_a_write_that_says_what_it_changes_is_fine(description):
    definition = tool(name="close_order", description=description, risk="write")
    assert rules(definition) == []


def test_the_seeds_overlapping_search_tools_are_warned_about_each_other():
    seed = [
        tool(name="find_text", description="Find text in the team's documents."),
        tool(name="search_file", description="Search files for a word or phrase."),
        tool(name="query_notes", description="Query the notes for a keyword."),
    ]
    found = lint_tools(seed)
    for name, others in (
        ("find_text", {"search_file", "query_notes"}),
        ("search_file", {"find_text", "query_notes"}),
        ("query_notes", {"find_text", "search_file"}),
    ):
        overlap = [w.message for w in found[name] if w.rule is Rule.OVERLAP]
        assert {m.split()[1] for m in overlap} == others


def test_tools_with_similar_descriptions_overlap_even_with_different_names():
    pair = [
        tool(
            name="get_weather",
            description="Return today's weather forecast for a city: temperature, "
            "rain and wind.",
        ),
        tool(
            name="fetch_forecast",
            description="Return the weather forecast for a city today: temperature, "
            "wind and rain.",
        ),
    ]
    found = lint_tools(pair)
    assert [w.rule for w in found["get_weather"]] == [Rule.OVERLAP]
    assert "Overlaps fetch_forecast" in found["get_weather"][0].message


def test_distinct_tools_do_not_overlap():
    pair = [
        tool(),
        tool(
            name="send_invoice",
            description="Send the invoice of an order to its customer by email. "
            "Changes: sends one email.",
            risk="write",
        ),
    ]
    assert lint_tools(pair) == {"get_order": [], "send_invoice": []}


# -- the command and the admin -----------------------------------------------------


def register_vague_tool(demo: Any) -> Tool:
    vague = Tool(
        name="notes",
        description="Handles notes.",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}},
        handler="search_notes",
        tags=["demo"],
    )
    tool_save(tool=vague, user=demo.admin)
    return vague


@pytest.mark.django_db
def test_lint_tools_exits_zero_on_the_demo_registry(demo, capsys):
    call_command("lint_tools")

    assert capsys.readouterr().out.strip() == "0 warnings in 7 tools."


@pytest.mark.django_db
def test_lint_tools_prints_one_line_per_warning_and_exits_one(demo, capsys):
    register_vague_tool(demo)

    with pytest.raises(SystemExit) as exit_:
        call_command("lint_tools")

    assert exit_.value.code == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "4 warnings in 8 tools."
    assert [line.split(": ")[:2] for line in lines[:-1]] == [
        ["notes", "name"],
        ["notes", "description"],
        ["notes", "description"],
        ["notes", "parameter"],
    ]


@pytest.mark.django_db
def test_lint_tools_exit_zero_only_reports(demo, capsys):
    register_vague_tool(demo)

    call_command("lint_tools", "--exit-zero")

    assert "notes: name:" in capsys.readouterr().out


@pytest.mark.django_db
def test_the_admin_list_shows_warnings_and_filters_by_them(client, demo):
    register_vague_tool(demo)
    client.force_login(demo.admin)

    listing = client.get("/admin/registry/tool/").content.decode()
    warned = client.get("/admin/registry/tool/?lint=yes").content.decode()
    clean = client.get("/admin/registry/tool/?lint=no").content.decode()

    assert "4 warnings" in listing
    assert 'href="?lint=yes"' in listing
    assert ">notes<" in warned and ">calculate<" not in warned
    assert ">calculate<" in clean and ">notes<" not in clean


@pytest.mark.django_db
def test_the_tool_page_shows_its_warnings(client, demo):
    vague = register_vague_tool(demo)
    client.force_login(demo.admin)

    page = client.get(f"/admin/registry/tool/{vague.pk}/change/").content.decode()
    clean = client.get(
        f"/admin/registry/tool/{Tool.objects.get(name='calculate').pk}/change/"
    ).content.decode()

    assert "Description lint" in page
    assert "<li>parameter: Parameter “q” has no description" in page
    assert "No warnings." in clean


@pytest.mark.django_db
def test_the_add_form_says_lint_comes_after_saving(client, demo):
    client.force_login(demo.admin)

    page = client.get("/admin/registry/tool/add/")

    assert page.status_code == 200
    assert "Shown after the tool is saved." in page.content.decode()
