"""``manage.py agent_label NAME SOURCE --to LABEL``: move an agent's label.

``agent_label assistant candidate --to production`` promotes the version
labelled candidate: chats and the API run it from the next message on. SOURCE
is a label or a version (``v3``). Without ``--to`` it lists the agent's
versions and their labels. Every move is audited (``agent.label_moved``).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from registry import versions
from registry.models import Agent, AgentVersion


class Command(BaseCommand):
    help = "Move an agent's label (production, candidate, any) to a version."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("agent", help="the agent's name")
        parser.add_argument(
            "source", nargs="?", help="a label or a version (v3) to point at"
        )
        parser.add_argument("--to", dest="label", help="the label to move")
        parser.add_argument("--as", dest="username", help="who moves it (audited)")

    def handle(self, *args: Any, **options: Any) -> None:
        agent = Agent.objects.filter(name=options["agent"]).first()
        if agent is None:
            raise CommandError(f"No agent named {options['agent']!r}.")
        if not options["label"]:
            self._list(agent)
            return
        if not options["source"]:
            raise CommandError("Name the version to label: a label or v3.")
        user = None
        if options["username"]:
            user = get_user_model().objects.filter(username=options["username"]).first()
            if user is None:
                raise CommandError(f"No user {options['username']!r}.")
        try:
            label = versions.label_promote(
                agent=agent,
                source=options["source"],
                target=options["label"],
                user=user,
            )
        except versions.VersionError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        self.stdout.write(f"{agent.name}: {label.name} is now v{label.version.number}")

    def _list(self, agent: Agent) -> None:
        labels = versions.labels_of(agent)
        running = versions.version_resolve(agent)
        for version in AgentVersion.objects.filter(agent=agent).order_by("-number"):
            names = ", ".join(labels.get(version.number, []))
            mark = "*" if running is not None and running.pk == version.pk else " "
            self.stdout.write(
                f"{mark} v{version.number:<4} {version.changed_at:%Y-%m-%d %H:%M} "
                f"{names:<24} {version.note}"
            )
