"""``manage.py export_audit``: the audit log as JSON lines."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from audit.services import audit_json_lines


class Command(BaseCommand):
    help = "Write the audit log as JSON lines (oldest first) to stdout or a file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--after", type=int, default=0, help="only events after this position"
        )
        parser.add_argument("--limit", type=int, default=None, help="at most N events")
        parser.add_argument("--output", "-o", default="-", help="a file, or - (stdout)")

    def handle(self, *args: Any, **options: Any) -> None:
        lines = audit_json_lines(after=options["after"], limit=options["limit"])
        if options["output"] == "-":
            for line in lines:
                self.stdout.write(line, ending="")
            return
        count = 0
        with open(options["output"], "w", encoding="utf-8") as out:
            for line in lines:
                out.write(line)
                count += 1
        self.stderr.write(f"{count} events written to {options['output']}")
