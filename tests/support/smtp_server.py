"""A local SMTP server for the mail tests: a real socket on loopback, threads.

Django's SMTP backend talks to it as to any mail server. It records every
message it receives (``messages``) before it answers, and can misbehave the two
ways that matter to a dispatcher:

- ``hold_first``: the reply to the first message's DATA waits until
  ``release()`` (a send in flight for as long as the test wants);
- ``silent``: accept connections and never greet (a server that stalls, so only
  the client's timeout ends the wait).
"""

from __future__ import annotations

import socketserver
import threading
from dataclasses import dataclass
from email import message_from_bytes
from email.message import Message
from typing import Any


@dataclass(frozen=True)
class Received:
    """One message as the server got it."""

    mail_from: str
    rcpt_to: tuple[str, ...]
    data: bytes

    @property
    def message(self) -> Message:
        return message_from_bytes(self.data)


class LocalSMTP:
    """``LocalSMTP().start()``; ``host``/``port`` for ``EMAIL_HOST``/``EMAIL_PORT``."""

    def __init__(self, *, hold_first: bool = False, silent: bool = False) -> None:
        self.silent = silent
        self.messages: list[Received] = []
        self.connections = 0
        #: Set when the first message's DATA has arrived (its reply may wait).
        self.first_received = threading.Event()
        self._released = threading.Event()
        if not hold_first:
            self._released.set()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._server: socketserver.ThreadingTCPServer | None = None

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def port(self) -> int:
        assert self._server is not None, "start() the server first"
        return int(self._server.server_address[1])

    def release(self) -> None:
        """Let the held reply to the first message go."""
        self._released.set()

    def start(self) -> LocalSMTP:
        owner = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                owner._serve(self)

        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> LocalSMTP:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- one connection --------------------------------------------------------

    def _serve(self, conn: socketserver.StreamRequestHandler) -> None:
        with self._lock:
            self.connections += 1
        if self.silent:
            self._stopping.wait()
            return

        def reply(line: str) -> None:
            conn.wfile.write(line.encode() + b"\r\n")
            conn.wfile.flush()

        reply("220 localhost test SMTP")
        mail_from = ""
        rcpt_to: list[str] = []
        while not self._stopping.is_set():
            raw = conn.rfile.readline()
            if not raw:
                return
            verb, _, argument = raw.decode("latin-1").strip().partition(" ")
            verb = verb.upper()
            if verb in ("EHLO", "HELO"):
                reply("250 localhost")
            elif verb == "MAIL":
                mail_from, rcpt_to = _address(argument), []
                reply("250 OK")
            elif verb == "RCPT":
                rcpt_to.append(_address(argument))
                reply("250 OK")
            elif verb == "DATA":
                reply("354 End data with <CR><LF>.<CR><LF>")
                data = _read_data(conn)
                with self._lock:
                    self.messages.append(Received(mail_from, tuple(rcpt_to), data))
                    first = len(self.messages) == 1
                if first:
                    self.first_received.set()
                    self._released.wait()
                reply("250 OK queued")
            elif verb == "RSET":
                mail_from, rcpt_to = "", []
                reply("250 OK")
            elif verb == "NOOP":
                reply("250 OK")
            elif verb == "QUIT":
                reply("221 Bye")
                return
            else:
                reply("502 Command not implemented")


def _address(argument: str) -> str:
    """The address of ``FROM:<a@b>`` / ``TO:<a@b>``."""
    _, _, value = argument.partition(":")
    return value.strip().split(" ")[0].strip("<>")


def _read_data(conn: socketserver.StreamRequestHandler) -> bytes:
    lines: list[bytes] = []
    while True:
        line = conn.rfile.readline()
        if not line or line in (b".\r\n", b".\n"):
            return b"".join(lines)
        # Undo the dot-stuffing of RFC 5321 4.5.2.
        lines.append(line[1:] if line.startswith(b"..") else line)


def use_smtp(settings: Any, server: LocalSMTP, *, timeout: float | None = None) -> None:
    """Send Django's mail to ``server`` (``settings``: pytest-django's fixture)."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = server.host
    settings.EMAIL_PORT = server.port
    settings.EMAIL_HOST_USER = ""
    settings.EMAIL_HOST_PASSWORD = ""
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_USE_SSL = False
    if timeout is not None:
        settings.EMAIL_TIMEOUT = timeout
