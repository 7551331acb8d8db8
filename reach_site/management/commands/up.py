"""``manage.py up``: start and supervise every process Agent Reach needs.

``python manage.py up [--port N] [--host 127.0.0.1] [--no-model] [--concurrency N]``

The command reads the settings and the environment into a plan; the supervising
is :mod:`reach_site.launcher`'s (Django-free), which says what starts, in what
order, and how crashes and Ctrl-C are handled.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from reach_site import launcher


class Command(BaseCommand):
    help = (
        "Start and supervise redis (embedded unless REDIS_URL), the local model "
        "(unless OPENAI_BASE_URL or --no-model), the web server (uvicorn unless "
        "REACH_WEB_SERVER), a Celery worker and beat. "
        "Ctrl-C stops everything."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--port", type=int, default=None, help="web port (default: $PORT or 8000)"
        )
        parser.add_argument(
            "--host", default=launcher.LOOPBACK, help="web bind address"
        )
        parser.add_argument(
            "--no-model", action="store_true", help="do not start the local model"
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            default=None,
            help="worker threads (default: settings.CELERY_WORKER_CONCURRENCY)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            plan = launcher.make_plan(
                port=options["port"],
                host=options["host"],
                no_model=options["no_model"],
                concurrency=options["concurrency"]
                or settings.CELERY_WORKER_CONCURRENCY,
                var_dir=Path(settings.VAR_DIR),
                base_dir=Path(settings.BASE_DIR),
                model_name=settings.OPENAI_MODEL,
                environ=os.environ,
            )
            launcher.run(plan, launcher.Output(sys.stdout))
        except launcher.LaunchError as error:
            raise CommandError(str(error)) from None
