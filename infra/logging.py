"""JSON-lines logging with a redacting filter on every handler."""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
from typing import Any

from engine.redaction import Redactor
from infra.runtime import redactor

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

#: The task a log line concerns (set by the runner around a run).
current_task_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "current_task_id", default=None
)
#: The intent (route) of that task's turn, once chosen (engine.routing).
current_intent: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "current_intent", default=None
)


class RedactingFilter(logging.Filter):
    """Scrub secrets from the message and arguments of every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        task_id = current_task_id.get()
        if task_id and not hasattr(record, "task_id"):
            record.task_id = task_id
        intent = current_intent.get()
        if intent and not hasattr(record, "intent"):
            record.intent = intent
        try:
            r = redactor()
        except Exception:  # noqa: BLE001 - before Django is ready
            r = Redactor()
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001
            return True
        record.msg = r.text(message)
        record.args = None
        for key, value in list(vars(record).items()):
            # Extras given with extra={...} are written by the JSON formatter too.
            if key not in _STANDARD and isinstance(value, (str, dict, list)):
                setattr(record, key, r.data(value))
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = r.text(
                logging.Formatter().formatException(record.exc_info)
            )
            record.exc_info = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line; extra fields (task_id, …) become keys."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_text:
            data["exception"] = record.exc_text
        elif record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)
