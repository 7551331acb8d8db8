"""Routing by intent: offer a turn only the toolsets its message needs.

An agent may define toolsets: a tool tag, a short description and keywords
(:class:`Toolset`). At the start of each turn (each task) the run picks the
toolsets that fit the user's message and offers the model only their tools,
plus the tools that belong to no toolset (those are always offered):

1. Rules first: a toolset is picked when one of its keywords occurs in the
   message (case-insensitive substring, so it works for text without spaces,
   such as Chinese). This happens when the task starts, with no model call.
2. Only when no rule matches, and the agent allows it, the model is asked once:
   a short classification call, recorded as the run's first ``model_call``
   step (its detail carries the route, :data:`~engine.spec.DetailKey.ROUTE`).
   An answer that names no known tag and is not ``none``, or a failed call,
   offers every tool (``general``).
3. With the model fallback off, a message no rule matches offers every tool
   (``general``).

The chosen label (:attr:`Route.intent`) is the picked tags joined by ``+``
(``notes+math``), ``none`` (the model said no toolset is needed: only the tools
outside every toolset) or ``general`` (nothing narrowed). Plain Python: the
agent's toolsets are recorded in the run's snapshot under :data:`ROUTING_KEY`,
a route chosen by rules under :data:`ROUTE_KEY`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .spec import DetailKey, StepKind, StepRecord, Toolbox

#: Where an agent snapshot records the agent's toolsets (:class:`Routing`).
ROUTING_KEY = "routing"
#: Where an agent snapshot records a route chosen by rules at the start.
ROUTE_KEY = "route"

#: Every tool offered (nothing matched, or the model could not tell).
GENERAL = "general"
#: No toolset needed: only the tools that belong to none.
NONE = "none"

TAG_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
MAX_TOOLSETS = 20
MAX_KEYWORDS = 50
MAX_DESCRIPTION = 300


class RouteBy(StrEnum):
    """What chose a route."""

    RULE = "rule"
    MODEL = "model"
    #: Neither: no rule matched and the model was not asked (or failed).
    DEFAULT = "default"


@dataclass(frozen=True)
class Toolset:
    """The tools tagged ``tag``, described for the routing call, with keywords."""

    tag: str
    description: str = ""
    keywords: tuple[str, ...] = ()

    def matches(self, text: str) -> bool:
        folded = text.casefold()
        return any(k.casefold() in folded for k in self.keywords if k.strip())

    def to_json(self) -> dict[str, Any]:
        return {
            "tag": self.tag,
            "description": self.description,
            "keywords": list(self.keywords),
        }


@dataclass(frozen=True)
class Route:
    """The toolsets one turn offers: ``tags`` None offers every tool."""

    intent: str
    tags: tuple[str, ...] | None
    by: RouteBy

    def to_json(self) -> dict[str, Any]:
        return {
            "intent": self.intent,
            "tags": list(self.tags) if self.tags is not None else None,
            "by": self.by.value,
        }

    @classmethod
    def from_json(cls, data: Any) -> Route | None:
        if not isinstance(data, Mapping) or not isinstance(data.get("intent"), str):
            return None
        tags = data.get("tags")
        try:
            by = RouteBy(str(data.get("by")))
        except ValueError:
            by = RouteBy.DEFAULT
        return cls(
            intent=data["intent"],
            tags=tuple(str(t) for t in tags) if isinstance(tags, list) else None,
            by=by,
        )


def check_toolsets(data: Any) -> list[Toolset]:
    """The toolsets of an agent's definition; ValueError says what is wrong.

    ``data`` is a list of ``{"tag", "description", "keywords": [...]}``; tags
    are unique and not ``general`` or ``none`` (the labels of no choice).
    """
    if data in (None, ""):
        return []
    if not isinstance(data, list):
        raise ValueError(
            'Toolsets are a list: [{"tag": "notes", "description": "...", '
            '"keywords": ["note", "笔记"]}, ...].'
        )
    if len(data) > MAX_TOOLSETS:
        raise ValueError(f"At most {MAX_TOOLSETS} toolsets.")
    toolsets: list[Toolset] = []
    for number, item in enumerate(data, start=1):
        where = f"Toolset {number}"
        if not isinstance(item, Mapping):
            raise ValueError(f"{where} is not an object.")
        unknown = set(item) - {"tag", "description", "keywords"}
        if unknown:
            raise ValueError(
                f"{where} has unknown keys: {', '.join(sorted(map(str, unknown)))} "
                "(use tag, description, keywords)."
            )
        tag = item.get("tag")
        if not isinstance(tag, str) or not TAG_RE.match(tag):
            raise ValueError(
                f"{where}: tag is a tool tag of lowercase letters, digits, - and _ "
                "(up to 40, starting with a letter)."
            )
        if tag in (GENERAL, NONE):
            raise ValueError(f"{where}: '{tag}' is reserved; choose another tag.")
        if any(t.tag == tag for t in toolsets):
            raise ValueError(f"{where}: the tag '{tag}' is used twice.")
        description = item.get("description", "")
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
            raise ValueError(
                f"{where}: description is text of at most {MAX_DESCRIPTION} characters."
            )
        keywords = item.get("keywords", [])
        if (
            not isinstance(keywords, list)
            or len(keywords) > MAX_KEYWORDS
            or not all(isinstance(k, str) and k.strip() for k in keywords)
        ):
            raise ValueError(
                f"{where}: keywords are a list of at most {MAX_KEYWORDS} non-empty "
                "strings."
            )
        toolsets.append(
            Toolset(
                tag=tag,
                description=description.strip(),
                keywords=tuple(k.strip() for k in keywords),
            )
        )
    return toolsets


def tool_tags(definition: Mapping[str, Any]) -> tuple[str, ...]:
    tags = definition.get("tags") or ()
    return tuple(str(t) for t in tags) if isinstance(tags, list | tuple) else ()


@dataclass(frozen=True)
class Routing:
    """An agent's toolsets and whether the model may pick when rules do not."""

    toolsets: tuple[Toolset, ...]
    ask_model: bool = True

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(t.tag for t in self.toolsets)

    def by_rules(self, text: str) -> Route | None:
        """The toolsets whose keywords occur in ``text``; None when none does."""
        tags = tuple(t.tag for t in self.toolsets if t.matches(text))
        if not tags:
            return None
        return Route(intent="+".join(tags), tags=tags, by=RouteBy.RULE)

    @staticmethod
    def general(by: RouteBy = RouteBy.DEFAULT) -> Route:
        return Route(intent=GENERAL, tags=None, by=by)

    def at_start(self, text: str) -> Route | None:
        """The route the task starts with: by rules, else ``general`` when the
        model is not to be asked, else None (the run asks it first)."""
        route = self.by_rules(text)
        if route is None and not self.ask_model:
            return self.general()
        return route

    # -- the routing call ----------

    def classification_messages(self, text: str) -> list[dict[str, Any]]:
        """The messages of the one short call that picks toolsets for ``text``."""
        listed = "\n".join(
            f"- {t.tag}: {t.description or 'tools tagged ' + t.tag}"
            for t in self.toolsets
        )
        system = (
            "You route a user's request to the toolsets it needs. The toolsets:\n"
            f"{listed}\n\n"
            "Answer with the tags of the toolsets the request needs, separated by "
            "commas, or with none if it needs none of them. Answer with tags only, "
            "no other words."
        )
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": text},
        ]

    def from_reply(self, content: str | None) -> Route:
        """The route the routing call's answer names."""
        words = set(re.findall(r"[a-z0-9_-]+", (content or "").casefold()))
        tags = tuple(t.tag for t in self.toolsets if t.tag in words)
        if tags:
            return Route(intent="+".join(tags), tags=tags, by=RouteBy.MODEL)
        if NONE in words:
            return Route(intent=NONE, tags=(), by=RouteBy.MODEL)
        return self.general(RouteBy.MODEL)

    # -- what a route offers ----------

    def offers(self, route: Route, tags: Iterable[str]) -> bool:
        """Whether ``route`` offers a tool tagged ``tags``: every tool outside
        every toolset, and the tools of the chosen toolsets."""
        if route.tags is None:
            return True
        own = set(tags)
        if not own.intersection(self.tags):
            return True
        return bool(own.intersection(route.tags))

    def definitions(
        self, route: Route, definitions: Sequence[Mapping[str, Any]]
    ) -> tuple[dict[str, Any], ...]:
        """The tool definitions (of a snapshot) that ``route`` offers."""
        return tuple(dict(d) for d in definitions if self.offers(route, tool_tags(d)))

    def narrow(self, toolbox: Toolbox, route: Route) -> Toolbox:
        """``toolbox`` with only the tools ``route`` offers."""
        specs = {
            name: spec
            for name, spec in toolbox.specs.items()
            if self.offers(route, spec.tags)
        }
        return Toolbox(
            specs=specs,
            handlers={n: h for n, h in toolbox.handlers.items() if n in specs},
        )

    # -- as recorded ----------

    def to_json(self) -> dict[str, Any]:
        return {
            "toolsets": [t.to_json() for t in self.toolsets],
            "ask_model": self.ask_model,
        }

    @classmethod
    def from_json(cls, data: Any) -> Routing | None:
        """Routing as recorded; None when there is none (or nothing valid)."""
        if not isinstance(data, Mapping):
            return None
        try:
            toolsets = check_toolsets(data.get("toolsets"))
        except ValueError:
            return None
        if not toolsets:
            return None
        return cls(toolsets=tuple(toolsets), ask_model=data.get("ask_model") is True)


def recorded_route(steps: Iterable[StepRecord]) -> Route | None:
    """The route a run's routing call recorded (on a model_call step), if any."""
    for step in steps:
        if step.kind is StepKind.MODEL_CALL and DetailKey.ROUTE in step.detail:
            return Route.from_json(step.detail[DetailKey.ROUTE]) or Routing.general()
    return None
