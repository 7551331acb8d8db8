"""``manage.py verify_audit``: check the audit log's hash chain."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.services import audit_verify


class Command(BaseCommand):
    help = "Verify every audit event's hash and link; fail on any tampering."

    def handle(self, *args: Any, **options: Any) -> None:
        count, problems = audit_verify()
        for problem in problems:
            self.stderr.write(problem)
        self.stdout.write(f"{count} audit events checked")
        if problems:
            raise CommandError(
                f"The audit log was tampered with: {len(problems)} "
                f"problem{'s' if len(problems) != 1 else ''} found."
            )
        self.stdout.write("The hash chain is intact.")
