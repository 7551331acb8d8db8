"""No app's templates reach above the app: the templates' half of the layers.

import-linter sees Python imports only. A template that loads a tag library
(``{% load x %}``) or reverses a route by its name (``{% url 'name' %}``) depends on
the app that defines the library or serves the route as surely as an import does,
unseen. The templates of an app (``templates/<app>/``, and ``templates/admin/<app>/``
for its admin) are held to the layers contract of ``pyproject.toml``: they may use
their own app's libraries and routes, those of lower layers and Django's, never a
higher layer's, nor an independent sibling's (``a | b`` in the contract). The
templates at the top (``base.html``, the error pages, ``registration/``) are the
site's, which sits above every app.

A page of a higher app is linked through a filter of a lower tag library backed by
a slot that the higher app fills (``{{ task.pk|trace_url }}``, runs/ports.py).
"""

from __future__ import annotations

import inspect
import re
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from django.template.backends.django import get_installed_libraries
from django.urls import URLPattern, URLResolver, get_resolver

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "templates"

LOAD = re.compile(r"{%\s*load\s+(.+?)\s*%}")
URL = re.compile(r"""{%\s*url\s+(['"])([^'"]+)\1""")

#: Uses that break the rule for now, each with why: (template, "load" or "url",
#: the library or route) -> reason. An entry that no longer matches anything fails
#: the test, so that it is removed once its template is fixed.
KNOWN_EXCEPTIONS: dict[tuple[str, str, str], str] = {}


class Use(NamedTuple):
    template: str  # relative to templates/
    kind: str  # "load" or "url"
    name: str  # the library or the route


@cache
def layers() -> dict[str, tuple[int, bool]]:
    """Each app of the layers contract: (its layer, top first; whether that layer's
    apps are independent of each other)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(
        c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"
    )
    ranks: dict[str, tuple[int, bool]] = {}
    for index, layer in enumerate(contract["layers"]):
        independent = ":" not in layer
        for name in re.split(r"[|:]", layer):
            ranks[name.strip().strip("()")] = (index, independent)
    return ranks


def may_use(app: str, other: str) -> bool:
    """Whether ``app``'s templates may use what ``other`` defines."""
    ranks = layers()
    if other == app or other not in ranks:
        return True  # its own, or Django's and third parties'
    (mine, _), (theirs, independent) = ranks[app], ranks[other]
    return theirs > mine or (theirs == mine and not independent)


@cache
def library_owners() -> dict[str, str]:
    """Each tag library's name and the top-level package that defines it."""
    return {
        name: module.split(".")[0] for name, module in get_installed_libraries().items()
    }


@cache
def route_owners() -> dict[str, str]:
    """Each named route (``namespace:name``) and the package of the view serving it."""
    owners: dict[str, str] = {}

    def walk(patterns: list[Any], namespace: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else ""
                walk(pattern.url_patterns, inner or namespace)
            elif isinstance(pattern, URLPattern) and pattern.name:
                # A class's view, or the function under its decorators.
                callback = pattern.callback
                view = getattr(callback, "view_class", None) or inspect.unwrap(callback)
                package = view.__module__.split(".")[0]
                owners.setdefault(namespace + pattern.name, package)

    walk(get_resolver().url_patterns, "")
    return owners


def app_of(template: Path) -> str | None:
    """The app whose template this is, or None for the site's."""
    parts = template.relative_to(TEMPLATES).parts
    if parts[0] == "admin" and len(parts) > 2:
        parts = parts[1:]
    return parts[0] if len(parts) > 1 and parts[0] in layers() else None


def uses() -> Iterator[tuple[str, Use]]:
    """(app, use) of each library loaded, each route reversed by name, in the apps'
    templates."""
    for path in sorted(TEMPLATES.rglob("*.html")):
        app = app_of(path)
        if app is None:
            continue
        text = path.read_text()
        relative = path.relative_to(TEMPLATES).as_posix()
        for match in LOAD.finditer(text):
            words = match.group(1).split()
            for library in [words[-1]] if "from" in words else words:
                yield app, Use(relative, "load", library)
        for match in URL.finditer(text):
            yield app, Use(relative, "url", match.group(2))


def owner_of(use: Use) -> str | None:
    owners = library_owners() if use.kind == "load" else route_owners()
    return owners.get(use.name)


def describe(app: str, use: Use, owner: str) -> str:
    what = (
        f"{{% load {use.name} %}}"
        if use.kind == "load"
        else f"{{% url '{use.name}' %}}"
    )
    relation = "a sibling of" if layers()[owner][0] == layers()[app][0] else "above"
    return f"templates/{use.template}: {what} belongs to {owner}, {relation} {app}"


def test_no_app_template_loads_a_library_or_reverses_a_route_of_a_higher_app():
    breaches = []
    for app, use in uses():
        owner = owner_of(use)
        if owner is None or may_use(app, owner) or use in KNOWN_EXCEPTIONS:
            continue
        breaches.append(describe(app, use, owner))
    assert not breaches, (
        "A template uses what a higher app defines; give it the link as data, or "
        "through a filter of a lower library backed by a slot (runs/ports.py):\n"
        + "\n".join(breaches)
    )


def test_every_library_and_route_an_app_template_names_is_known():
    # A name the scan cannot place would escape the rule above.
    unknown = [
        f"templates/{use.template}: {use.kind} {use.name!r}"
        for _, use in uses()
        if owner_of(use) is None
    ]
    assert not unknown, "\n".join(unknown)


def test_every_known_exception_still_happens():
    found = {Use(*key) for key in KNOWN_EXCEPTIONS}
    stale = found - {use for _, use in uses()}
    assert not stale, f"No longer needed, remove from KNOWN_EXCEPTIONS: {stale}"


def test_the_scan_reads_the_contract_the_templates_and_the_site():
    ranks = layers()
    assert ranks["runs"][0] > ranks["traces"][0] > ranks["evals"][0]
    assert ranks["traces"] == ranks["memory"] and ranks["memory"][1]
    assert library_owners()["reach"] == "runs"
    assert library_owners()["approval_tags"] == "approvals"
    assert route_owners()["trace"] == "traces"
    assert route_owners()["chat"] == "runs"
    assert {app for app, _ in uses()} >= {"runs", "approvals", "traces", "memory"}
    assert not may_use("runs", "traces") and not may_use("memory", "traces")
    assert may_use("traces", "runs") and may_use("runs", "django")
