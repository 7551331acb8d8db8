"""The SSRF rule of a URL the product itself posts to (a webhook), beside the
HTTP tools' guard it reuses (:mod:`registry.adapters.ssrf`).

Here, not in ``notify``, because the apps below it validate such URLs too: a
conversation's completion webhook is set through ``runs``' API.
"""

from __future__ import annotations

import httpx

from registry.adapters import ssrf
from registry.adapters.http import internal_hosts


def guard_for(url: str, allowed_hosts: list[str]) -> ssrf.Guard:
    """The guard of a webhook: its own host, plus the addresses listed for it.

    A host written as a non-public address (``http://10.0.0.5/``) is not allowed
    by being the URL's: the target must list it, as an HTTP tool must.
    """
    host = httpx.URL(url).host
    address = ssrf.as_address(host) if host else None
    own = [] if address is not None and ssrf.address_problem(address) else [host]
    return ssrf.Guard.from_entries([*own, *allowed_hosts], internal_hosts())


def url_problem(url: str, allowed_hosts: list[str]) -> str | None:
    """Why ``url`` cannot be a webhook's (None when it can, as far as the URL
    tells: where its name resolves is checked on every send)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        return f"Not a valid URL ({exc})."
    problems = ssrf.entry_problems(allowed_hosts)
    if problems:
        return " ".join(problems)
    if not parsed.host:
        return "The URL has no host."
    try:
        guard = guard_for(url, allowed_hosts)
        guard.check_url(parsed)
        address = ssrf.as_address(parsed.host)
        if address is not None:
            # An address literal: checked now, as the connection will be.
            guard.connect_addresses(parsed.host, parsed.port or 443)
    except ssrf.Blocked as exc:
        return str(exc)
    return None


def internal_url_problem(url: str) -> str | None:
    """:func:`url_problem` for a URL with no allowed addresses of its own (a
    completion webhook): only what ``REACH_INTERNAL_HOSTS`` lists may be
    non-public, as for HTTP tools."""
    return url_problem(url, internal_hosts())
