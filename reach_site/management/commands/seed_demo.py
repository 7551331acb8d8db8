from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from reach_site.demo import demo_password, seed_demo, seed_demo_versions


class Command(BaseCommand):
    help = "Create the demo agent, tools, notes and users (only what is missing)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--if-enabled",
            action="store_true",
            help="Only when REACH_SEED_DEMO is on (default: with the embedded SQLite).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["if_enabled"] and not settings.REACH_SEED_DEMO:
            self.stdout.write("REACH_SEED_DEMO is off: no demo data.")
            return
        # The versions come after (and apart from) the seed the tests share:
        # a production label would hold their edits of the agent back.
        created = seed_demo() + seed_demo_versions()
        if created:
            self.stdout.write("Created: " + ", ".join(created))
        else:
            self.stdout.write("Demo data already present; nothing changed.")
        self.stdout.write(
            f"Demo users: admin, operator, alice, bob — password: {demo_password()}"
        )
