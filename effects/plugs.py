"""What effects plugs in: its built-in handlers (they register themselves with
the registry on import) and the mail outbox that approvals mails approvers
through (runs/ports.py)."""

from __future__ import annotations

from effects import builtins  # noqa: F401
from effects.services import mail_queue
from runs.ports import MailPort, plug_mail

plug_mail(MailPort(queue=mail_queue))
