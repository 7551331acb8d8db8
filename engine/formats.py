"""JSON-Schema ``format`` checks for tool arguments, before anything runs.

JSON Schema treats ``format`` as an annotation unless a validator asserts it;
here it is asserted, so that "明天" for a ``"format": "date"`` parameter fails
the call's validation with a message that tells the model what was expected
("expected YYYY-MM-DD, e.g. 2025-03-14") and the call never reaches its handler.

Each check is plain Python (no optional jsonschema extras, no network) and
strict: the grammar of the RFC the format names, ASCII digits only, real
calendar dates and times. A value that is not a string passes the format check
(``type`` is what refuses it). Formats not listed in :data:`FORMATS` stay
annotations; the registry's lint warns about them (:data:`CHECKED_FORMATS`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from jsonschema import FormatChecker

# -- the checks ---------------------------------------------------------------------

_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})", re.ASCII)
_TIME = re.compile(
    r"([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?"
    r"([Zz]|[+-]([0-9]{2}):([0-9]{2}))",
    re.ASCII,
)


def _parses(parse: Callable[[], object]) -> bool:
    """Whether ``parse()`` accepts its value (raises no ``ValueError``)."""
    try:
        parse()
    except ValueError:
        return False
    return True


def is_date(value: str) -> bool:
    """RFC 3339 ``full-date``: ``YYYY-MM-DD``, a day that exists."""
    match = _DATE.fullmatch(value)
    if match is None:
        return False
    year, month, day = (int(part) for part in match.groups())
    return _parses(lambda: dt.date(year, month, day))


def is_time(value: str) -> bool:
    """RFC 3339 ``full-time``: ``HH:MM:SS[.frac]`` and a zone (``Z`` or ±HH:MM).

    A leap second (``:60``) is taken, as RFC 3339 allows it.
    """
    match = _TIME.fullmatch(value)
    if match is None:
        return False
    hour, minute, second = (int(match.group(i)) for i in (1, 2, 3))
    if hour > 23 or minute > 59 or second > 60:
        return False
    if match.group(6) is not None:
        if int(match.group(6)) > 23 or int(match.group(7)) > 59:
            return False
    return True


def is_date_time(value: str) -> bool:
    """RFC 3339 ``date-time``: a date, ``T``, a time with its zone."""
    date, separator, time = value.partition("T")
    if not separator:
        date, separator, time = value.partition("t")
    return bool(separator) and is_date(date) and is_time(time)


_DURATION = re.compile(
    r"P(?:[0-9]+W|(?=[0-9T])(?:[0-9]+Y)?(?:[0-9]+M)?(?:[0-9]+D)?"
    r"(?:T(?=[0-9])(?:[0-9]+H)?(?:[0-9]+M)?(?:[0-9]+S)?)?)",
    re.ASCII,
)


def is_duration(value: str) -> bool:
    """RFC 3339 Appendix A ``duration``: ``P3D``, ``PT1H30M``, ``P2W``."""
    return value != "P" and _DURATION.fullmatch(value) is not None


_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LOCAL = re.compile(rf"{_ATEXT}(?:\.{_ATEXT})*", re.ASCII)
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)


def is_hostname(value: str) -> bool:
    """RFC 1123 host name: dot-separated labels of letters, digits and hyphens."""
    name = value[:-1] if value.endswith(".") else value
    if not name or len(name) > 253:
        return False
    return all(_LABEL.fullmatch(label) for label in name.split("."))


def is_email(value: str) -> bool:
    """RFC 5321 mailbox (the common form): ``local@domain``, one ``@``, no
    spaces; the domain a host name or an address literal (``[192.0.2.1]``)."""
    local, at, domain = value.rpartition("@")
    if not at or not local or len(local) > 64 or len(value) > 254:
        return False
    if _LOCAL.fullmatch(local) is None:
        return False
    if domain.startswith("[") and domain.endswith("]"):
        literal = domain[1:-1]
        if literal.lower().startswith("ipv6:"):
            return is_ipv6(literal[5:])
        return is_ipv4(literal)
    return is_hostname(domain)


def is_ipv4(value: str) -> bool:
    """Dotted-quad IPv4 (RFC 2673): four decimal octets, no leading zeros."""
    return value.isascii() and _parses(lambda: ipaddress.IPv4Address(value))


def is_ipv6(value: str) -> bool:
    """An IPv6 address (RFC 4291), without a zone index (``%eth0``)."""
    if not value.isascii() or "%" in value:
        return False
    return _parses(lambda: ipaddress.IPv6Address(value))


def is_uuid(value: str) -> bool:
    """RFC 4122 in its hyphenated form: 8-4-4-4-12 hexadecimal digits."""
    if len(value) != 36 or not value.isascii():
        return False
    if [len(part) for part in value.split("-")] != [8, 4, 4, 4, 12]:
        return False
    return _parses(lambda: uuid.UUID(value))


_SCHEME = r"[A-Za-z][A-Za-z0-9+.-]*"
#: What RFC 3986 allows in a URI outside the scheme (reserved, unreserved and
#: percent signs; the escapes are checked apart).
_URI_CHARS = r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*"
_URI = re.compile(rf"{_SCHEME}:{_URI_CHARS}", re.ASCII)
_URI_REFERENCE = re.compile(rf"(?:{_SCHEME}:)?{_URI_CHARS}", re.ASCII)
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


_SCHEME_PREFIX = re.compile(rf"{_SCHEME}:", re.ASCII)


def _uri_like(value: str, grammar: re.Pattern[str]) -> bool:
    if grammar.fullmatch(value) is None or _BAD_ESCAPE.search(value):
        return False
    if "[" not in value and "]" not in value:
        return True
    # Square brackets only around an IP literal, the host of the authority.
    scheme = _SCHEME_PREFIX.match(value)
    rest = value[scheme.end() :] if scheme else value
    if not rest.startswith("//") or rest.count("[") != 1 or rest.count("]") != 1:
        return False
    authority = re.split(r"[/?#]", rest[2:], maxsplit=1)[0]
    host = authority.rsplit("@", 1)[-1]
    return host.startswith("[") and (host.endswith("]") or "]:" in host)


def is_uri(value: str) -> bool:
    """An absolute URI (RFC 3986): a scheme, ``:``, then only URI characters."""
    return _uri_like(value, _URI)


def is_uri_reference(value: str) -> bool:
    """A URI or a relative reference (RFC 3986)."""
    return _uri_like(value, _URI_REFERENCE)


# -- the table ----------------------------------------------------------------------


@dataclass(frozen=True)
class Format:
    """One checked format: its check and what the model is told it expects."""

    name: str
    check: Callable[[str], bool]
    expected: str

    def accepts(self, value: object) -> bool:
        return not isinstance(value, str) or self.check(value)


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("date", is_date, "YYYY-MM-DD, e.g. 2025-03-14"),
        Format(
            "date-time",
            is_date_time,
            "an RFC 3339 date-time with a time zone, e.g. 2025-03-14T09:30:00+08:00",
        ),
        Format("time", is_time, "HH:MM:SS with a time zone, e.g. 09:30:00+08:00"),
        Format("duration", is_duration, "an ISO 8601 duration, e.g. P3D or PT1H30M"),
        Format("email", is_email, "one e-mail address, e.g. name@example.com"),
        Format("hostname", is_hostname, "a host name, e.g. api.example.com"),
        Format("ipv4", is_ipv4, "an IPv4 address, e.g. 192.0.2.10"),
        Format("ipv6", is_ipv6, "an IPv6 address, e.g. 2001:db8::1"),
        Format(
            "uri", is_uri, "an absolute URI with its scheme, e.g. https://example.com/a"
        ),
        Format(
            "uri-reference",
            is_uri_reference,
            "a URI or a relative reference, e.g. /docs/a?b=1",
        ),
        Format(
            "uuid",
            is_uuid,
            "a UUID, 8-4-4-4-12 hex digits, e.g. 123e4567-e89b-12d3-a456-426614174000",
        ),
    )
}

#: The formats a tool's parameters may name and have checked.
CHECKED_FORMATS = frozenset(FORMATS)


def expected(name: str) -> str | None:
    """What a value of format ``name`` looks like (None if it is not checked)."""
    found = FORMATS.get(name)
    return found.expected if found is not None else None


def _checker() -> FormatChecker:
    checker = FormatChecker(formats=())
    for item in FORMATS.values():
        checker.checks(item.name)(item.accepts)
    return checker


#: The checker argument validation hands to jsonschema.
FORMAT_CHECKER = _checker()
