"""HTTP tools: a request described in the admin, filled in from the model's arguments.

A tool of kind ``http`` carries its request in ``tool.http``::

    {"method": "GET", "url": "https://api.example.com/users/{user}/repos",
     "query": {"q": "{keyword}"}, "headers": {"Authorization":
     "Bearer {{secret:EXAMPLE_TOKEN}}"}, "body": null,
     "response_fields": ["/items"], "allowed_hosts": ["api.example.com"]}

**Templates** are filled in one pass: ``{param}`` takes the argument ``param``
(strings as they are, other values as compact JSON); in the URL it is
percent-encoded with ``/`` included, so an argument can never change the host or
add path segments. ``{{secret:NAME}}`` is resolved in header templates only (the
environment's ``REACH_SECRET_NAME`` wins over the admin's store); anywhere else
it stays literal. A filled-in value is never scanned again, so an argument that
contains ``{other}`` or ``{{secret:X}}`` is sent literally. In a JSON body, a
string that is exactly ``"{param}"`` takes the argument's JSON value. A query
parameter, header or body field whose whole template is one ``{param}`` that the
model left out (or sent as null) is omitted; any other missing argument is an
error for the model. Placeholders are not allowed in the URL's scheme, host or
port.

**Sending**: through the SSRF guard of :mod:`registry.adapters.ssrf` (hosts from
``allowed_hosts``, the address actually connected checked on every hop, proxies
ignored); redirects are followed by hand (at most ``REACH_HTTP_MAX_REDIRECTS``),
each to an allowed host, dropping secret-bearing headers when the origin
changes. The tool's ``timeout_s`` bounds connect, read, write and pool waits.
Writes (risk ``write`` / ``irreversible``) send the call's idempotency key as
``Idempotency-Key``.

**Answers**: JSON bodies come back as data, trimmed to ``response_fields`` (JSON
pointers); other bodies as ``{"status": code, "text": first characters}``.
429, 502, 503, 504 and connection failures raise RetryableToolError (the
executor retries them only for retry-safe tools: reads, or idempotent writes);
other 4xx/5xx raise ToolError with the status and a short redacted excerpt.

**Inside the house** (:func:`leaves_house`): a tool whose every allowed host is
an explicitly listed non-public address or network, or a hostname in
``REACH_INTERNAL_HOSTS``, stays inside; any other host is outside, so a tainted
task's call needs approval (a read can exfiltrate through its URL).
"""

from __future__ import annotations

import copy
import functools
import json
import re
import ssl
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from django.conf import settings as django_settings
from django.db import close_old_connections, connection

from audit.models import AuditKind
from audit.services import audit_append
from engine.execution import RetryableToolError, ToolError, select_fields
from engine.json_input import loads_strict
from engine.redaction import MIN_SECRET_LENGTH
from engine.spec import CallContext, ErrorClass, Handler, Risk
from infra.runtime import redactor
from registry.adapters import ssrf
from registry.models import Tool
from registry.secrets import secret_value

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
SETTINGS_KEYS = (
    "method",
    "url",
    "query",
    "headers",
    "body",
    "response_fields",
    "allowed_hosts",
)
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
#: Headers that carry credentials: dropped when a redirect changes origin.
CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
IDEMPOTENCY_HEADER = "Idempotency-Key"

#: ``{{secret:NAME}}`` or ``{param}``; everything else is literal text.
TOKEN = re.compile(r"\{\{secret:([A-Za-z0-9_]+)\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
WHOLE_PARAM = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_SECRET_START = re.compile(r"\{\{\s*secret\s*:", re.I)
_ABSOLUTE_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://[^/?#]*)(.*)$", re.S)
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


class _Absent:
    """Marks a whole-template value whose argument was not given."""


ABSENT = _Absent()


class MissingArgument(ToolError):
    """A template needs an argument the model did not send."""

    error_class = ErrorClass.INVALID_ARGUMENTS

    def __init__(self, name: str) -> None:
        super().__init__(
            f"The argument '{name}' is needed to build this tool's request; "
            "call the tool again with it."
        )
        self.name = name


# -- settings -----------------------------------------------------------------------


@dataclass(frozen=True)
class HttpSettings:
    """The ``http`` settings of a tool (already validated by ``tool_clean``)."""

    method: str
    url: str
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    response_fields: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> HttpSettings:
        data = data or {}
        return cls(
            method=str(data.get("method") or "GET").upper(),
            url=str(data.get("url") or ""),
            query={str(k): str(v) for k, v in (data.get("query") or {}).items()},
            headers={str(k): str(v) for k, v in (data.get("headers") or {}).items()},
            body=data.get("body"),
            response_fields=tuple(data.get("response_fields") or ()),
            allowed_hosts=tuple(data.get("allowed_hosts") or ()),
        )

    def guard(self, internal_hosts: Iterable[str] = ()) -> ssrf.Guard:
        return ssrf.Guard.from_entries(self.allowed_hosts, internal_hosts)


def http_settings_errors(
    http: Any,
    parameters: Mapping[str, Any] | None,
    *,
    idempotent: bool = False,
    max_retries: int = 0,
) -> list[str]:
    """Everything wrong with a tool's ``http`` settings (empty when valid)."""
    if not isinstance(http, Mapping) or not http:
        return [
            'An HTTP tool needs "http" settings: {"method", "url", "allowed_hosts", …}.'
        ]
    errors: list[str] = []
    unknown = sorted(set(http) - set(SETTINGS_KEYS))
    if unknown:
        errors.append(
            "Unknown http settings: "
            + ", ".join(unknown)
            + ". Known: "
            + ", ".join(SETTINGS_KEYS)
            + "."
        )
    properties = (parameters or {}).get("properties") or {}
    declared = set(properties) if isinstance(properties, Mapping) else set()

    method = http.get("method", "GET")
    if method not in METHODS:
        errors.append(f"method is one of {', '.join(METHODS)}, not {method!r}.")
    elif method != "GET" and max_retries > 0 and not idempotent:
        errors.append(
            f"A {method} tool is retried only when it honours idempotency keys: "
            "mark it idempotent or set max_retries to 0."
        )

    hosts = http.get("allowed_hosts")
    if not isinstance(hosts, list) or not hosts:
        errors.append(
            "allowed_hosts lists the hosts the tool may reach, "
            'e.g. ["api.example.com"].'
        )
        hosts = []
    else:
        errors.extend(ssrf.entry_problems(hosts))

    url = http.get("url")
    if not isinstance(url, str) or not url.strip():
        errors.append("url is required (an http or https URL).")
    else:
        errors.extend(_url_errors(url, hosts, declared))

    for key in ("query", "headers"):
        value = http.get(key, {})
        if value is None:
            continue
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            errors.append(f"{key} maps names to template strings.")
            continue
        for name, template in value.items():
            where = f"{key} {name!r}"
            errors.extend(
                _template_errors(
                    template, declared, where, secrets_allowed=key == "headers"
                )
            )
            if key == "headers":
                if not _HEADER_NAME.match(name):
                    errors.append(f"{name!r} is not a valid header name.")
                elif name.lower() == IDEMPOTENCY_HEADER.lower():
                    errors.append(
                        "Agent Reach sends Idempotency-Key itself on writes; "
                        "remove it from headers."
                    )

    body = http.get("body")
    try:
        json.dumps(body)
    except (TypeError, ValueError):
        errors.append("body is a JSON template (or null).")
    else:
        for template in _strings(body):
            errors.extend(
                _template_errors(template, declared, "body", secrets_allowed=False)
            )

    fields = http.get("response_fields", [])
    if not isinstance(fields, list) or not all(
        isinstance(p, str) and (p == "" or p.startswith("/")) for p in fields
    ):
        errors.append('response_fields are JSON pointers, e.g. ["/items", "/total"].')
    return errors


def _url_errors(url: str, hosts: list[Any], declared: set[str]) -> list[str]:
    match = _ABSOLUTE_URL.match(url.strip())
    if not match:
        return ["url must be absolute: http(s)://host/path."]
    authority, rest = match.groups()
    errors = []
    if "{" in authority or "}" in authority:
        errors.append(
            "Placeholders may not appear in the URL's scheme, host or port "
            "(an argument must never choose where the request goes)."
        )
        return errors
    errors.extend(_template_errors(rest, declared, "url", secrets_allowed=False))
    try:
        parsed = httpx.URL(authority + "/")
    except httpx.InvalidURL as exc:
        return [*errors, f"url is not a valid URL: {exc}."]
    try:
        ssrf.Guard.from_entries(hosts).check_url(parsed)
    except ssrf.Blocked as exc:
        message = str(exc).removeprefix("Refused: ")
        errors.append(message[:1].upper() + message[1:])
    return errors


def _template_errors(
    template: str, declared: set[str], where: str, *, secrets_allowed: bool
) -> list[str]:
    errors = []
    for match in TOKEN.finditer(template):
        secret, param = match.groups()
        if secret is not None and not secrets_allowed:
            errors.append(
                f"{where}: {{{{secret:{secret}}}}} is allowed in header templates only."
            )
        if param is not None and param not in declared:
            errors.append(
                f"{where}: {{{param}}} is not a declared parameter"
                + (f" (declared: {', '.join(sorted(declared))})." if declared else ".")
            )
    stripped = TOKEN.sub("", template)
    if _SECRET_START.search(stripped):
        errors.append(
            f"{where}: malformed secret reference; write {{{{secret:NAME}}}} "
            "with letters, digits and underscores."
        )
    return errors


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


# -- templates ----------------------------------------------------------------------


def value_text(value: Any) -> str:
    """An argument as template text: strings as they are, others as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def render(
    template: str,
    arguments: Mapping[str, Any],
    *,
    encode: Callable[[str], str] | None = None,
    secret: Callable[[str], str] | None = None,
) -> str:
    """Fill ``template`` in one pass (filled-in text is never scanned again).

    ``secret`` resolves ``{{secret:NAME}}``; without it the reference stays
    literal. Raise MissingArgument for a ``{param}`` not given (or null).
    """

    def fill(match: re.Match[str]) -> str:
        secret_name, param = match.groups()
        if secret_name is not None:
            return match.group(0) if secret is None else secret(secret_name)
        if arguments.get(param) is None:
            raise MissingArgument(param)
        text = value_text(arguments[param])
        return encode(text) if encode is not None else text

    return TOKEN.sub(fill, template)


def _whole_absent(template: str, arguments: Mapping[str, Any]) -> bool:
    match = WHOLE_PARAM.match(template)
    return match is not None and arguments.get(match.group(1)) is None


def render_body(template: Any, arguments: Mapping[str, Any]) -> Any:
    """Fill a JSON body template; ``"{param}"`` alone takes the JSON value."""
    if isinstance(template, str):
        match = WHOLE_PARAM.match(template)
        if match is not None:
            value = arguments.get(match.group(1))
            return ABSENT if value is None else copy.deepcopy(value)
        return render(template, arguments)
    if isinstance(template, Mapping):
        filled = {}
        for key, item in template.items():
            value = render_body(item, arguments)
            if value is not ABSENT:
                filled[key] = value
        return filled
    if isinstance(template, list):
        values = [render_body(item, arguments) for item in template]
        return [None if v is ABSENT else v for v in values]
    return copy.deepcopy(template)


def render_url(template: str, arguments: Mapping[str, Any]) -> httpx.URL:
    """The URL with ``{param}`` percent-encoded (``/`` too) in path and query."""
    match = _ABSOLUTE_URL.match(template.strip())
    if match is None:
        raise ToolError("This tool's URL is not absolute; an operator must fix it.")
    authority, rest = match.groups()
    filled = authority + render(rest, arguments, encode=lambda t: quote(t, safe=""))
    try:
        return httpx.URL(filled)
    except httpx.InvalidURL as exc:
        raise ssrf.Blocked(f"Refused: not a valid URL ({exc}).") from exc


# -- the request ----------------------------------------------------------------------


@dataclass(frozen=True)
class RequestView:
    """One request as an operator may see it (secrets masked)."""

    method: str
    url: str
    headers: dict[str, str]
    body: Any = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "url": self.url,
            "headers": dict(self.headers),
            "body": self.body,
        }


@dataclass
class PreparedRequest:
    """A filled-in request: what is sent, and what may be shown."""

    method: str
    url: httpx.URL
    headers: dict[str, str]
    masked_headers: dict[str, str]
    secret_headers: frozenset[str]
    body: Any = ABSENT

    def view(self) -> RequestView:
        body = None if self.body is ABSENT else self.body
        return RequestView(
            method=self.method,
            url=redactor().text(str(self.url)),
            headers=redactor().data(dict(self.masked_headers)),
            body=redactor().data(body),
        )


def prepare_request(
    settings: HttpSettings,
    arguments: Mapping[str, Any],
    *,
    risk: Risk,
    idempotency_key: str,
    secret: Callable[[str], str],
) -> PreparedRequest:
    """Fill every template of ``settings`` from ``arguments``."""
    url = render_url(settings.url, arguments)
    query = {
        name: render(template, arguments)
        for name, template in settings.query.items()
        if not _whole_absent(template, arguments)
    }
    if query:
        url = url.copy_merge_params(query)
    headers: dict[str, str] = {}
    masked: dict[str, str] = {}
    secret_headers: set[str] = set()
    for name, template in settings.headers.items():
        if _whole_absent(template, arguments):
            continue
        value = render(template, arguments, secret=secret)
        if any(ch in value for ch in "\r\n\0"):
            raise ToolError(
                f"The value for header {name} contains a line break; send it without."
            )
        headers[name] = value
        masked[name] = render(template, arguments, secret=lambda n: f"[REDACTED:{n}]")
        if any(m.group(1) for m in TOKEN.finditer(template)):
            secret_headers.add(name.lower())
    if risk is not Risk.READ_ONLY and idempotency_key:
        for name in [n for n in headers if n.lower() == IDEMPOTENCY_HEADER.lower()]:
            headers.pop(name)
            masked.pop(name, None)
        headers[IDEMPOTENCY_HEADER] = idempotency_key
        masked[IDEMPOTENCY_HEADER] = idempotency_key
    body: Any = ABSENT
    if settings.body is not None:
        body = render_body(settings.body, arguments)
    return PreparedRequest(
        method=settings.method,
        url=url,
        headers=headers,
        masked_headers=masked,
        secret_headers=frozenset(secret_headers),
        body=body,
    )


# -- sending --------------------------------------------------------------------------


@dataclass
class Exchange:
    """What one call sent (every hop) and what came back."""

    requests: list[RequestView] = field(default_factory=list)
    status: int | None = None
    value: Any = None


@dataclass(frozen=True)
class SendOptions:
    timeout_s: float
    deadline: float | None = None
    max_redirects: int = 5
    max_response_bytes: int = 2_000_000
    text_chars: int = 2000
    response_fields: tuple[str, ...] = ()
    ssl_context: ssl.SSLContext | None = None


def send(
    prepared: PreparedRequest,
    guard: ssrf.Guard,
    options: SendOptions,
    exchange: Exchange | None = None,
) -> Exchange:
    """Send ``prepared`` through the guard, following redirects by hand.

    ``exchange`` (when given) records every hop even if the call then fails.
    """
    exchange = exchange if exchange is not None else Exchange()
    method, url = prepared.method, prepared.url
    headers = dict(prepared.headers)
    masked = dict(prepared.masked_headers)
    body = prepared.body
    with ssrf.guarded_client(
        guard, timeout=options.timeout_s, ssl_context=options.ssl_context
    ) as client:
        for _hop in range(options.max_redirects + 1):
            guard.check_url(url)
            view = PreparedRequest(
                method, url, headers, masked, prepared.secret_headers, body
            ).view()
            exchange.requests.append(view)
            status, response_headers, content, final_url = _send_one(
                client, method, url, headers, body, options
            )
            location = response_headers.get("location")
            if status in REDIRECT_STATUSES and location:
                try:
                    next_url = final_url.join(location)
                except httpx.InvalidURL as exc:
                    raise ssrf.Blocked(
                        f"Refused: the redirect target is not a valid URL ({exc})."
                    ) from exc
                if _origin(next_url) != _origin(url):
                    for name in list(headers):
                        lowered = name.lower()
                        if (
                            lowered in prepared.secret_headers
                            or lowered in CREDENTIAL_HEADERS
                        ):
                            headers.pop(name)
                            masked.pop(name, None)
                if status == 303 or (status in (301, 302) and method == "POST"):
                    method, body = "GET", ABSENT
                url = next_url
                continue
            exchange.status = status
            exchange.value = _result(status, response_headers, content, url, options)
            return exchange
    raise ToolError(
        f"Too many redirects (more than {options.max_redirects}); the last one "
        f"pointed to {url.host}."
    )


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    default = {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, ssrf.normalize_name(url.host), url.port or default


def _send_one(
    client: httpx.Client,
    method: str,
    url: httpx.URL,
    headers: Mapping[str, str],
    body: Any,
    options: SendOptions,
) -> tuple[int, httpx.Headers, bytes, httpx.URL]:
    timeout = options.timeout_s
    if options.deadline is not None:
        timeout = min(timeout, options.deadline - time.monotonic())
        if timeout <= 0:
            raise RetryableToolError(f"{url.host} did not answer in time.")
    content: bytes | None = None
    # Non-ASCII header values go out as UTF-8 bytes (httpx only encodes ASCII).
    send_headers = httpx.Headers(
        [
            (name.encode("ascii"), value.encode("utf-8"))
            for name, value in headers.items()
        ]
    )
    if body is not ABSENT:
        content = json.dumps(body, ensure_ascii=False).encode()
        if "content-type" not in send_headers:
            send_headers["Content-Type"] = "application/json"
    if "accept" not in send_headers:
        send_headers["Accept"] = "application/json, */*;q=0.5"
    request = client.build_request(
        method,
        url,
        headers=send_headers,
        content=content,
        timeout=httpx.Timeout(timeout),
    )
    try:
        response = client.send(request, stream=True)
        try:
            data = _read_limited(response, options.max_response_bytes)
        finally:
            response.close()
    except httpx.TimeoutException as exc:
        raise RetryableToolError(
            f"{url.host} did not answer in time ({exc.__class__.__name__})."
        ) from exc
    except httpx.LocalProtocolError as exc:
        raise ToolError(f"The request could not be sent: {exc}.") from exc
    except httpx.UnsupportedProtocol as exc:
        raise ssrf.Blocked(f"Refused: {exc}.") from exc
    except httpx.ConnectError as exc:
        if _certificate_error(exc):
            # Not transient: retrying cannot make a wrong certificate right.
            raise ToolError(f"{url.host} failed TLS verification: {exc}.") from exc
        raise RetryableToolError(f"Could not reach {url.host}: {exc}.") from exc
    except httpx.TransportError as exc:
        raise RetryableToolError(f"Could not reach {url.host}: {exc}.") from exc
    return response.status_code, response.headers, data, response.url


def _certificate_error(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _read_limited(response: httpx.Response, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > limit:
            raise ToolError(
                f"The response is larger than {limit} bytes; narrow the request."
            )
        chunks.append(chunk)
    return b"".join(chunks)


def _result(
    status: int,
    headers: httpx.Headers,
    content: bytes,
    url: httpx.URL,
    options: SendOptions,
) -> Any:
    text = _decode(content, headers)
    if status in RETRYABLE_STATUSES:
        raise RetryableToolError(
            f"HTTP {status} from {url.host}: {_excerpt(text)}".rstrip(": ")
        )
    if status >= 300:
        raise ToolError(f"HTTP {status} from {url.host}: {_excerpt(text)}".rstrip(": "))
    content_type = headers.get("content-type", "").lower()
    if content and "json" in content_type:
        try:
            data = loads_strict(text)
        except ValueError:
            # Not JSON after all (or nested past what is taken in): the text.
            pass
        else:
            return select_fields(data, options.response_fields)
    if not content:
        return {"status": status, "text": ""}
    return {"status": status, "text": text[: options.text_chars]}


def _decode(content: bytes, headers: httpx.Headers) -> str:
    charset = "utf-8"
    match = re.search(r"charset=([\w\-]+)", headers.get("content-type", ""), re.I)
    if match:
        charset = match.group(1)
    try:
        return content.decode(charset, errors="replace")
    except LookupError:
        return content.decode("utf-8", errors="replace")


def _excerpt(text: str, limit: int = 200) -> str:
    flat = " ".join(text[: limit * 4].split())
    flat = redactor().text(flat)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# -- secrets ----------------------------------------------------------------------


def resolve_secret(name: str) -> str:
    """A secret's value for a header; the redactor learns it before it is used."""
    # Handlers run on pool threads: a fresh connection, closed afterwards.
    fresh = not connection.in_atomic_block
    if fresh:
        close_old_connections()
    try:
        value = secret_value(name)
        if not value:
            raise ToolError(
                f"The secret {name} is not set; an operator must add it in the "
                f"admin (Secrets) or set REACH_SECRET_{name}."
            )
        if len(value) < MIN_SECRET_LENGTH:
            raise ToolError(
                f"The secret {name} is shorter than {MIN_SECRET_LENGTH} characters "
                "and could not be redacted; an operator must replace it."
            )
        known = redactor()
        if known.text(value) != f"[REDACTED:{name}]":
            known.add(name, value)
        return value
    finally:
        if fresh:
            connection.close()


# -- the handler ----------------------------------------------------------------------


def send_options(tool: Tool, deadline: float | None = None) -> SendOptions:
    """Limits of one call, from the tool and the settings (read per call)."""
    text_chars = int(getattr(django_settings, "REACH_HTTP_TEXT_CHARS", 2000))
    if tool.max_result_chars:
        text_chars = min(text_chars, tool.max_result_chars)
    bundle = getattr(django_settings, "REACH_HTTP_CA_BUNDLE", "")
    return SendOptions(
        timeout_s=float(tool.timeout_s),
        deadline=deadline,
        max_redirects=int(getattr(django_settings, "REACH_HTTP_MAX_REDIRECTS", 5)),
        max_response_bytes=int(
            getattr(django_settings, "REACH_HTTP_MAX_RESPONSE_BYTES", 2_000_000)
        ),
        text_chars=text_chars,
        response_fields=HttpSettings.from_json(tool.http).response_fields,
        ssl_context=_ca_bundle_context(bundle) if bundle else None,
    )


@functools.cache
def _ca_bundle_context(path: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=path)


def internal_hosts() -> list[str]:
    return list(getattr(django_settings, "REACH_INTERNAL_HOSTS", []) or [])


def http_handler(tool: Tool) -> Handler:
    """The handler that runs ``tool`` (kind ``http``) for the executor."""
    http = HttpSettings.from_json(tool.http)
    risk = Risk(tool.risk)

    def handle(arguments: dict[str, Any], context: CallContext) -> Any:
        prepared = prepare_request(
            http,
            arguments,
            risk=risk,
            idempotency_key=context.idempotency_key,
            secret=resolve_secret,
        )
        options = send_options(tool, deadline=context.deadline)
        return send(prepared, http.guard(internal_hosts()), options).value

    return handle


def leaves_house(tool: Tool) -> bool:
    """True unless every allowed host of ``tool`` is inside the house.

    Inside: an explicitly listed loopback/private/link-local address or network,
    or a host listed in the ``REACH_INTERNAL_HOSTS`` setting (hostnames, or
    networks that contain the listed address). No allowed host at all counts as
    leaving (fail closed).
    """
    hosts = HttpSettings.from_json(tool.http).allowed_hosts
    if not hosts:
        return True
    internal = internal_hosts()
    return not all(ssrf.is_internal_entry(host, internal) for host in hosts)


# -- Try it (the admin's button) ---------------------------------------------------


@dataclass
class TryReport:
    """What the admin's Try it page shows."""

    dry_run: bool
    requests: list[dict[str, Any]] = field(default_factory=list)
    status: int | None = None
    result: Any = None
    error: str | None = None


def sample_arguments(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Example arguments for a schema: examples, defaults, else empty values."""
    samples: dict[str, Any] = {}
    empty: dict[str, Any] = {
        "string": "",
        "integer": 0,
        "number": 0,
        "boolean": False,
        "array": [],
        "object": {},
    }
    properties = schema.get("properties") or {}
    for name, spec in properties.items():
        if not isinstance(spec, Mapping):
            continue
        if spec.get("examples"):
            samples[name] = spec["examples"][0]
        elif "default" in spec:
            samples[name] = spec["default"]
        elif spec.get("enum"):
            samples[name] = spec["enum"][0]
        else:
            kind = spec.get("type")
            samples[name] = empty.get(kind if isinstance(kind, str) else "", "")
    return samples


def http_tool_try(
    *, tool: Tool, arguments: Mapping[str, Any], user: Any = None
) -> TryReport:
    """Run ``tool`` once for an operator; a write is only shown (a dry run).

    Arguments must already be valid against the tool's schema. Secrets are
    masked in the request shown, and the response is redacted.
    """
    http = HttpSettings.from_json(tool.http)
    dry_run = tool.risk != Risk.READ_ONLY
    report = TryReport(dry_run=dry_run)
    try:
        prepared = prepare_request(
            http,
            arguments,
            risk=Risk(tool.risk),
            idempotency_key=f"try:{uuid.uuid4()}",
            secret=resolve_secret,
        )
        if dry_run:
            http.guard(internal_hosts()).check_url(prepared.url)
            report.requests = [prepared.view().as_dict()]
        else:
            exchange = Exchange()
            try:
                send(
                    prepared,
                    http.guard(internal_hosts()),
                    send_options(tool, time.monotonic() + float(tool.timeout_s)),
                    exchange,
                )
            finally:
                report.requests = [r.as_dict() for r in exchange.requests] or [
                    prepared.view().as_dict()
                ]
            report.status = exchange.status
            report.result = redactor().data(
                select_fields(exchange.value, tuple(tool.result_fields or ()))
            )
    except ToolError as exc:
        report.error = redactor().text(str(exc))
    audit_append(
        kind=AuditKind.TOOL_TRIED,
        actor=user,
        object_type="tool",
        object_id=tool.name,
        data={"dry_run": dry_run, "status": report.status, "ok": not report.error},
    )
    return report


__all__ = [
    "HttpSettings",
    "TryReport",
    "http_handler",
    "http_settings_errors",
    "http_tool_try",
    "leaves_house",
    "prepare_request",
    "render",
    "render_body",
    "render_url",
    "sample_arguments",
    "send",
]
