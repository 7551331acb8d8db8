"""Traces by agent version: the list filters by it, shows it, the stats page
groups by it, and the trace document carries it."""

from __future__ import annotations

import re

import pytest

from registry import versions
from tests.support.clients import logged_in, trace_of
from tests.support.runs import ask
from tests.support.scripted_model import EchoScript

pytestmark = pytest.mark.django_db(transaction=True)


def page(user, url: str) -> str:
    response = logged_in(user).get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def listed(html: str) -> list[str]:
    return re.findall(r'<tr data-task="([0-9a-f-]+)"', html)


@pytest.fixture
def runs_of_two_versions(demo, model):
    """Two runs of v1 and one of v2 of the assistant, the last one while the
    production label points back at v1."""
    model(EchoScript())
    agent = demo.agent
    first = ask(demo.alice, agent, "one")
    agent.max_steps = 6
    agent.save()
    second = ask(demo.alice, agent, "two")
    v1 = agent.versions.get(number=1)
    versions.label_move(agent=agent, name="production", version=v1)
    third = ask(demo.alice, agent, "three")
    return first, second, third


def test_the_list_filters_by_version_and_shows_it(demo, runs_of_two_versions):
    first, second, third = runs_of_two_versions
    assert [t.agent_version for t in runs_of_two_versions] == [1, 2, 1]

    html = page(demo.alice, "/traces/?agent_version=2")
    assert listed(html) == [str(second.pk)]
    assert 'data-testid="agent-version">v2<' in html
    assert 'name="agent_version" value="2"' in html
    assert set(listed(page(demo.alice, "/traces/?agent_version=v1"))) == {
        str(first.pk),
        str(third.pk),
    }
    assert listed(page(demo.alice, "/traces/?agent_version=nine")) == []
    assert len(listed(page(demo.alice, "/traces/"))) == 3


def test_the_stats_page_groups_the_runs_by_version(demo, runs_of_two_versions):
    html = page(demo.alice, "/traces/stats/")
    table = html.split('data-testid="version-stats"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(
        r'<tr data-agent="([^"]+)" data-version="(\d*)"><td>[^<]*</td><td>.*?</td>'
        r"<td>(\d+)</td>",
        table,
    )
    assert rows == [("assistant", "2", "1"), ("assistant", "1", "2")]
    assert "/traces/?agent=assistant&amp;agent_version=2" in table
    narrowed = page(demo.alice, "/traces/stats/?agent_version=2")
    table = narrowed.split('data-testid="version-stats"', 1)[1].split("</table>")[0]
    assert 'data-version="1"' not in table and 'data-version="2"' in table


def test_the_trace_document_names_the_version(demo, runs_of_two_versions):
    _, second, _ = runs_of_two_versions
    document = trace_of(logged_in(demo.alice), second.pk)
    assert document["task"]["agent_version"] == 2


def test_the_trace_page_names_the_version_with_a_link_to_its_runs(
    demo, runs_of_two_versions
):
    _, second, _ = runs_of_two_versions
    html = page(demo.alice, f"/traces/{second.pk}/")
    assert 'href="/traces/?agent=assistant&amp;agent_version=2"' in html
    assert 'data-testid="agent-version"' in html
