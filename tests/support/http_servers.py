"""Local HTTP servers for the HTTP-tool tests: real sockets on loopback, threads.

``LocalServer(respond)`` records every request it gets (``hits``) before it
answers, so a test that has its response back can count hits without waiting.
The default responder echoes the request as JSON. The ``local_server`` fixture
(registered by the root conftest) starts servers and stops them after the test.
"""

from __future__ import annotations

import datetime as dt
import json
import ssl
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.lifecycle import Started


@dataclass(frozen=True)
class Hit:
    """One request as the server received it."""

    method: str
    target: str  # the request target exactly as sent (path and query, encoded)
    headers: dict[str, str]  # lowercased names
    body: bytes

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.target).query, keep_blank_values=True)

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    """What the server answers: JSON data, text, or bytes, with headers."""

    status: int = 200
    data: Any = None
    text: str | None = None
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Bytes sent as they are (a malformed answer), with ``content_type``.
    raw: bytes | None = None

    def encode(self) -> tuple[bytes, str]:
        if self.raw is not None:
            return self.raw, self.content_type or "application/octet-stream"
        if self.text is not None:
            return self.text.encode(), self.content_type or "text/plain; charset=utf-8"
        if self.data is None:
            return b"", self.content_type or "application/json"
        body = json.dumps(self.data, ensure_ascii=False).encode()
        return body, self.content_type or "application/json"


Responder = Callable[[Hit], Reply]


def echo(hit: Hit) -> Reply:
    """Answer with the request itself as JSON."""
    try:
        body: Any = hit.json() if hit.body else None
    except ValueError:
        body = hit.body.decode(errors="replace")
    return Reply(
        data={
            "method": hit.method,
            "path": hit.path,
            "target": hit.target,
            "query": hit.query,
            "headers": hit.headers,
            "body": body,
        }
    )


def redirect(location: str, status: int = 302) -> Reply:
    return Reply(status=status, headers={"Location": location})


class Sequence:
    """Answers with ``replies`` in order, then repeats the last one."""

    def __init__(self, replies: Iterable[Reply | Responder]) -> None:
        self._replies = list(replies)
        self._lock = threading.Lock()
        self._index = 0

    def __call__(self, hit: Hit) -> Reply:
        with self._lock:
            reply = self._replies[min(self._index, len(self._replies) - 1)]
            self._index += 1
        return reply(hit) if callable(reply) else reply


class LocalServer(Started):
    """A threaded HTTP server on a loopback address; ``url(path)`` builds URLs."""

    def __init__(
        self,
        respond: Responder = echo,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.respond = respond
        self.hits: list[Hit] = []
        self._lock = threading.Lock()
        self.released = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                hit = Hit(
                    method=self.command,
                    target=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
                with server._lock:
                    server.hits.append(hit)
                reply = server.respond(hit)
                payload, content_type = reply.encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer((host, port), Handler)
        self.scheme = "http"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self.scheme = "https"
        self._server.daemon_threads = True
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
        )

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def url(self, path: str = "/", host: str | None = None) -> str:
        return f"{self.scheme}://{host or self.host}:{self.port}{path}"


@pytest.fixture
def local_server() -> Iterator[Callable[..., LocalServer]]:
    """``local_server(respond, host, port, tls)`` -> a started server."""
    servers: list[LocalServer] = []

    def start(
        respond: Responder = echo,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> LocalServer:
        server = LocalServer(respond, host=host, port=port, tls=tls).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def tls_files(directory: Path, names: list[str]) -> tuple[Path, ssl.SSLContext, list]:
    """A private CA (its PEM path) and a server context for ``names``.

    The returned list collects the SNI names the server is asked for.
    """
    now = dt.datetime.now(dt.UTC)

    def build(subject: str, issuer_key: Any, issuer: x509.Name | None, ca: bool):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer or name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False
            )
        cert = builder.sign(issuer_key or key, hashes.SHA256())
        return key, cert

    ca_key, ca_cert = build("Reach test CA", None, None, True)
    leaf_key, leaf_cert = build(names[0], ca_key, ca_cert.subject, False)
    ca_path = directory / "ca.pem"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_path = directory / "server.pem"
    cert_path.write_bytes(
        leaf_cert.public_bytes(serialization.Encoding.PEM)
        + leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path)
    asked: list[str | None] = []
    context.sni_callback = lambda _sock, name, _ctx: asked.append(name)  # type: ignore[assignment,func-returns-value]
    return ca_path, context, asked
