"""Redaction of secrets from everything recorded.

Known secret values (the model API key, HTTP-tool secrets) and common credential
patterns become ``[REDACTED:kind]``. Applied to step payloads, answers, approvals,
audit rows, exports, log lines and websocket frames.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

_PATTERNS: list[tuple[str, re.Pattern[str], str]] = [
    # Credentials in URLs: scheme://user:password@host
    (
        "url_credentials",
        re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^/\s:@]+:)([^/\s@]+)(@)"),
        r"\1[REDACTED:url_credentials]\3",
    ),
    (
        "bearer_token",
        re.compile(r"(?i)\b(bearer\s+)([A-Za-z0-9._~+/\-]{8,}=*)"),
        r"\1[REDACTED:bearer_token]",
    ),
    ("api_key", re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"), "[REDACTED:api_key]"),
    (
        "aws_access_key",
        re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
        "[REDACTED:aws_access_key]",
    ),
    (
        "github_token",
        re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
        "[REDACTED:github_token]",
    ),
    (
        "slack_token",
        re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}\b"),
        "[REDACTED:slack_token]",
    ),
    (
        "private_key",
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----",
            re.S,
        ),
        "[REDACTED:private_key]",
    ),
    (
        "password",
        re.compile(
            r"(?i)\b((?:password|passwd|pwd|secret|api[_-]?key|access[_-]?token|"
            r"aws_secret_access_key|client[_-]?secret)\s*[=:]\s*)"
            r"(\"[^\"]*\"|'[^']*'|[^\s&,;\"']+)"
        ),
        r"\1[REDACTED:password]",
    ),
]

MIN_SECRET_LENGTH = 6

# Something every pattern above needs: one C-level search lets the (many) strings
# that hold no credential skip the eight substitutions. Keep it in step with them.
_TRIGGER = re.compile(
    r"(?i)://|bearer|sk-|akia|asia|gh[pousr]_|xox|-----begin|password|passwd|pwd"
    r"|secret|api[_-]?key|access[_-]?token"
)


class Redactor:
    """Scrubs secret values and credential patterns from text and JSON data.

    ``secret_source`` is called (at most every ``refresh_s``) to learn secret
    values added since start, so new secrets are redacted without a restart.
    """

    def __init__(
        self,
        secrets: Mapping[str, str] | None = None,
        *,
        secret_source: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._static = dict(secrets or {})
        self._source = secret_source
        self._values: list[tuple[str, str]] = []
        self._rebuild(self._static)

    def _rebuild(self, secrets: Mapping[str, str]) -> None:
        values = [
            (value, name)
            for name, value in secrets.items()
            if value and len(value) >= MIN_SECRET_LENGTH
        ]
        # Longest first, so a secret containing another is replaced whole.
        values.sort(key=lambda item: len(item[0]), reverse=True)
        with self._lock:
            self._values = values

    def refresh(self) -> None:
        """Reload secret values from the source (cheap; call when they change)."""
        secrets = dict(self._static)
        if self._source is not None:
            secrets.update(self._source())
        self._rebuild(secrets)

    def add(self, name: str, value: str) -> None:
        self._static[name] = value
        self.refresh()

    def text(self, text: str) -> str:
        if not text:
            return text
        with self._lock:
            values = list(self._values)
        for value, name in values:
            if value in text:
                text = text.replace(value, f"[REDACTED:{name}]")
        if _TRIGGER.search(text) is None:
            return text
        for _kind, pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text

    def data(self, value: Any) -> Any:
        """Redact every string (keys included) inside JSON-like data."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(item) for item in value]
        return value
