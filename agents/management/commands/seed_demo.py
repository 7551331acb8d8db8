from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from agents.demo import demo_password, seed_demo


class Command(BaseCommand):
    help = "Create the demo agent, tools, notes and users (only what is missing)."

    def handle(self, *args: Any, **options: Any) -> None:
        created = seed_demo()
        if created:
            self.stdout.write("Created: " + ", ".join(created))
        else:
            self.stdout.write("Demo data already present; nothing changed.")
        self.stdout.write(
            f"Demo users: admin, operator, alice, bob — password: {demo_password()}"
        )
