"""``manage.py lint_tools``: description lint over the tool registry."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand

from registry.lint import lint_registry


class Command(BaseCommand):
    help = (
        "Warn about tool names, descriptions and parameters that confuse models, "
        "one line per warning. Exits 1 when there is any warning."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "tools", nargs="*", help="Only report these tools (default: all)."
        )
        parser.add_argument(
            "--exit-zero",
            action="store_true",
            help="Report warnings but exit 0 (for information only).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        found = lint_registry()
        wanted = set(options["tools"] or found)
        unknown = wanted - set(found)
        for name in sorted(unknown):
            self.stderr.write(f"{name}: no such tool")
        count = 0
        for name in sorted(wanted & set(found)):
            for warning in found[name]:
                self.stdout.write(warning.line())
                count += 1
        checked = len(wanted & set(found))
        self.stdout.write(
            f"{count} warning{'s' if count != 1 else ''} in {checked} tool"
            f"{'s' if checked != 1 else ''}."
        )
        if (count or unknown) and not options["exit_zero"]:
            sys.exit(1)
