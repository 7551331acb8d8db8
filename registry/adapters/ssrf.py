"""The SSRF guard of HTTP tools: which URLs may be fetched, and which peers reached.

Two checks, both on every hop of a request (redirects included):

1. **The URL** (:meth:`Guard.check_url`): ``http`` or ``https`` only, no
   credentials in the URL, and the host must be one that ``allowed_hosts`` lists
   (a hostname, an IP address, or an IP network such as ``10.0.0.0/8``).
2. **The address actually connected** (:class:`GuardedBackend`): the transport
   resolves the name itself (through the module-level :func:`resolve`, the one
   seam tests replace), checks every address, connects to the checked IP literal
   (TLS still verifies and sends SNI for the name) and verifies the socket's peer.
   Nothing resolves the name a second time, so a DNS answer that changes between
   the check and the connection (DNS rebinding) cannot slip through.

An address that is not public (loopback, RFC 1918 private, CGNAT ``100.64/10``,
ULA ``fc00::/7``, link-local, cloud metadata, unspecified, multicast, reserved,
and IPv6 forms that embed one of them: IPv4-mapped, IPv4-compatible, NAT64,
6to4) is refused unless it is *explicitly* allowed:

- ``allowed_hosts`` lists the address itself (``127.0.0.1``), or a network that
  contains it (``10.0.0.0/8``); cloud metadata addresses only by the exact
  address (``169.254.169.254``), never through a network; or
- the hostname connected is one of the deployment's ``REACH_INTERNAL_HOSTS``
  (names the operator declares internal services); metadata addresses excepted.

Listing a *hostname* alone never allows it to resolve to a private address: if it
did, whoever controls that name's DNS could point it at ``127.0.0.1`` or the
metadata service.

Hosts are normalised before any comparison: case, a trailing dot, IDNA, IPv6
brackets, IPv4-mapped IPv6 (``::ffff:127.0.0.1`` is ``127.0.0.1``), and the
decimal, octal and hexadecimal IPv4 forms that ``inet_aton`` accepts
(``2130706433``, ``0177.0.0.1``, ``0x7f.1`` are all ``127.0.0.1``). Proxies from
the environment are ignored (``trust_env=False``): the request goes straight to
the checked address.

No Django import here: the caller passes ``REACH_INTERNAL_HOSTS`` in.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpcore
import httpx

from engine.execution import ToolError
from engine.spec import ErrorClass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOWED_SCHEMES = ("http", "https")

#: Instance metadata services of the big clouds (credentials live there).
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.169.253",  # AWS VPC DNS
        "100.100.100.200",  # Alibaba Cloud
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::253",  # AWS VPC DNS over IPv6
    )
)
METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.internal",
    }
)

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
#: Ranges inside any house: an allowed network within one of them is internal.
INTERNAL_NETWORKS: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "127.0.0.0/8",
        "100.64.0.0/10",
        "169.254.0.0/16",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
    )
)
#: Networks broader than this are refused in allowed_hosts (no "allow all").
MIN_PREFIX = {4: 8, 6: 32}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")


class Blocked(ToolError):
    """The guard refused a URL or an address (never retried)."""

    error_class = ErrorClass.BLOCKED


# -- resolution: the one seam tests replace -----------------------------------------


def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, in the resolver's order.

    Tests monkeypatch this function (``registry.adapters.ssrf.resolve``) to answer for
    names such as ``rebind.example`` without a network.
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[str] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


# -- normalisation ------------------------------------------------------------------


def parse_ipv4_loose(text: str) -> ipaddress.IPv4Address | None:
    """Read ``text`` the way ``inet_aton`` does, or return None.

    One to four parts separated by dots; each decimal, octal (leading ``0``) or
    hexadecimal (``0x``); the last part fills the remaining bytes. So
    ``2130706433``, ``0177.0.0.1``, ``0x7f.1`` and ``127.1`` are all 127.0.0.1.
    """
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values: list[int] = []
    for part in parts:
        if not part:
            return None
        if part[:2].lower() == "0x":
            digits, base, allowed = part[2:], 16, "0123456789abcdefABCDEF"
        elif len(part) > 1 and part[0] == "0":
            digits, base, allowed = part[1:], 8, "01234567"
        else:
            digits, base, allowed = part, 10, "0123456789"
        if any(ch not in allowed for ch in digits):
            return None
        values.append(int(digits or "0", base))
    if any(value > 255 for value in values[:-1]):
        return None
    if values[-1] >= 256 ** (5 - len(values)):
        return None
    number = values[-1]
    for index, value in enumerate(values[:-1]):
        number += value << (8 * (3 - index))
    return ipaddress.IPv4Address(number)


def canonical_address(address: IPAddress) -> IPAddress:
    """IPv4-mapped IPv6 addresses are their IPv4 address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def as_address(host: str) -> IPAddress | None:
    """``host`` as an IP address (any notation a resolver accepts), else None."""
    text = host.strip().strip("[]").rstrip(".")
    try:
        return canonical_address(ipaddress.ip_address(text))
    except ValueError:
        pass
    return parse_ipv4_loose(text)


def normalize_name(host: str) -> str:
    """A hostname in the form used for comparisons: lowercase ASCII, no final dot."""
    text = host.strip().rstrip(".").lower()
    try:
        return text.encode("idna").decode("ascii")
    except UnicodeError:
        return text


def _embedded_ipv4(address: IPAddress) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses that an IPv6 address carries (and may reach through)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    found: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    compatible = address in _IPV4_COMPATIBLE and int(address) > 1
    if address in _NAT64 or compatible:
        found.append(low32)
    return found


def address_problem(address: IPAddress) -> str | None:
    """Why ``address`` is not a public one (``None`` when it is public)."""
    # The embedded IPv4 address first: it names where the packet really goes.
    for candidate in (*_embedded_ipv4(address), address):
        problem = _own_problem(candidate)
        if problem is not None:
            return problem
    return None


def _own_problem(address: IPAddress) -> str | None:
    if address in METADATA_ADDRESSES:
        return "cloud metadata"
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if isinstance(address, ipaddress.IPv4Address) and address in _CGNAT:
        return "shared (CGNAT)"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "site-local"
    if address.is_private:
        return "private"
    if address.is_reserved or not address.is_global:
        return "reserved"
    return None


# -- allowed_hosts entries ---------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One ``allowed_hosts`` (or ``REACH_INTERNAL_HOSTS``) entry, parsed."""

    text: str
    name: str | None = None
    address: IPAddress | None = None
    network: IPNetwork | None = None
    problem: str | None = None


def parse_entry(text: Any) -> Entry:
    """Parse a hostname, an IP address or an IP network (CIDR).

    IP addresses must be written plainly (``127.0.0.1``, ``::1``): a numeric
    form such as ``2130706433`` is an invalid entry that never matches, so an
    address is only ever allowed by someone who wrote it recognisably.
    """
    if not isinstance(text, str) or not text.strip():
        return Entry(str(text), problem="An allowed host is a non-empty string.")
    raw = text.strip()
    value = raw.strip("[]").rstrip(".").lower()
    if "/" in value:
        try:
            network = ipaddress.ip_network(value, strict=False)
        except ValueError:
            return Entry(raw, problem=f"{raw!r} is not an IP network (10.0.0.0/8).")
        if network.prefixlen < MIN_PREFIX[network.version]:
            return Entry(
                raw,
                problem=f"{raw!r} is too broad: list networks of at least "
                f"/{MIN_PREFIX[network.version]}.",
            )
        return Entry(raw, network=network)
    try:
        return Entry(raw, address=canonical_address(ipaddress.ip_address(value)))
    except ValueError:
        pass
    loose = parse_ipv4_loose(value)
    if loose is not None:
        return Entry(raw, problem=f"Write the address {raw!r} as {loose}.")
    if "://" in value or ":" in value or "*" in value:
        return Entry(
            raw,
            problem=f"{raw!r}: list bare hosts (no scheme, port or wildcard).",
        )
    name = normalize_name(value)
    if len(name) > 253 or not all(_LABEL.match(label) for label in name.split(".")):
        return Entry(raw, problem=f"{raw!r} is not a valid hostname.")
    return Entry(raw, name=name)


def entry_problems(entries: Iterable[Any]) -> list[str]:
    """Messages for the entries that cannot be used."""
    return [e.problem for e in map(parse_entry, entries) if e.problem is not None]


def is_internal_entry(entry: Any, internal_hosts: Iterable[str] = ()) -> bool:
    """True when an allowed host is inside the house.

    Inside: an explicitly listed non-public address or network (loopback,
    private, ULA, link-local…), a hostname listed in ``internal_hosts``
    (``REACH_INTERNAL_HOSTS``), or an address/network within a network listed
    there. Any other hostname leaves the house: where it resolves is decided by
    someone else's DNS.
    """
    parsed = parse_entry(entry)
    internal = [parse_entry(e) for e in internal_hosts]
    internal_names = {e.name for e in internal if e.name}
    internal_networks = [e.network for e in internal if e.network is not None]
    internal_addresses = {e.address for e in internal if e.address is not None}
    if parsed.name is not None:
        return parsed.name in internal_names
    if parsed.address is not None:
        return (
            address_problem(parsed.address) is not None
            or parsed.address in internal_addresses
            or any(_within(parsed.address, n) for n in internal_networks)
        )
    if parsed.network is not None:
        return any(
            _subnet(parsed.network, n) for n in (*INTERNAL_NETWORKS, *internal_networks)
        )
    return False


def _subnet(inner: IPNetwork, outer: IPNetwork) -> bool:
    return inner.version == outer.version and inner.subnet_of(outer)  # type: ignore[arg-type]


def _within(address: IPAddress, network: IPNetwork) -> bool:
    return address.version == network.version and address in network


# -- the guard ----------------------------------------------------------------------


@dataclass(frozen=True)
class Guard:
    """The allowed hosts of one tool, and the checks made on every hop."""

    names: frozenset[str] = frozenset()
    addresses: frozenset[IPAddress] = frozenset()
    networks: tuple[IPNetwork, ...] = ()
    internal_names: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def from_entries(
        cls, allowed_hosts: Iterable[Any], internal_hosts: Iterable[str] = ()
    ) -> Guard:
        entries = [parse_entry(e) for e in allowed_hosts]
        internal = [parse_entry(e) for e in internal_hosts]
        return cls(
            names=frozenset(e.name for e in entries if e.name),
            addresses=frozenset(e.address for e in entries if e.address is not None),
            networks=tuple(e.network for e in entries if e.network is not None),
            internal_names=frozenset(e.name for e in internal if e.name),
        )

    # The URL ------------------------------------------------------------------

    def check_url(self, url: httpx.URL) -> None:
        """Raise Blocked unless ``url`` is http(s) to an allowed host."""
        scheme = url.scheme.lower()
        if scheme not in ALLOWED_SCHEMES:
            raise Blocked(
                f"Refused: only http and https URLs are allowed, not {scheme or '?'}:."
            )
        if url.userinfo:
            raise Blocked(
                "Refused: credentials in the URL are not allowed (use a header "
                "with a {{secret:NAME}})."
            )
        raw_host = url.raw_host.decode("ascii", "replace")
        if not raw_host:
            raise Blocked("Refused: the URL has no host.")
        address = as_address(raw_host)
        if address is not None:
            if address in self.addresses or any(
                _within(address, n) for n in self.networks
            ):
                return
            raise Blocked(f"Refused: host {address} is not in allowed_hosts.")
        name = normalize_name(raw_host)
        if name not in self.names:
            raise Blocked(f"Refused: host {name} is not in allowed_hosts.")
        if name in METADATA_HOSTS and not (self.addresses & METADATA_ADDRESSES):
            raise Blocked(f"Refused: {name} is a cloud metadata endpoint.")

    # The connection -----------------------------------------------------------

    def connect_addresses(self, host: str, port: int) -> list[str]:
        """The checked IP literals to connect to for ``host`` (raise Blocked).

        Every address the name resolves to must pass, or none is used.
        """
        address = as_address(host)
        name: str | None = None
        if address is not None:
            candidates = [address]
        else:
            name = normalize_name(host)
            try:
                answers = resolve(name, port)
            except (OSError, UnicodeError) as exc:
                raise httpcore.ConnectError(f"Could not resolve {name}: {exc}") from exc
            candidates = []
            for answer in answers:
                parsed = as_address(answer.split("%", 1)[0])
                if parsed is None:
                    raise Blocked(f"Refused: {name} resolved to {answer!r}.")
                candidates.append(parsed)
            if not candidates:
                raise httpcore.ConnectError(f"Could not resolve {name}.")
        refused = []
        for candidate in candidates:
            problem = address_problem(candidate)
            if problem is not None and not self._explicitly_allows(
                candidate, name, problem
            ):
                refused.append(f"{candidate} ({problem})")
        if refused:
            target = f"{name} resolves to " if name else "address "
            raise Blocked(
                f"Refused: {target}{', '.join(refused)}, which allowed_hosts does "
                "not list."
            )
        return [str(c) for c in candidates]

    def _explicitly_allows(
        self, address: IPAddress, name: str | None, problem: str
    ) -> bool:
        if address in self.addresses:
            return True
        if problem == "cloud metadata":
            return False
        if any(_within(address, n) for n in self.networks):
            return True
        return name is not None and name in self.internal_names


class GuardedBackend(httpcore.SyncBackend):
    """An httpcore network backend that connects only to checked addresses."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = self.guard.connect_addresses(host, port)
        error: Exception | None = None
        for address in addresses:
            try:
                stream = super().connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                error = exc
                continue
            peer = stream.get_extra_info("server_addr")
            connected = as_address(str(peer[0]).split("%", 1)[0]) if peer else None
            if connected is None or str(connected) != address:
                stream.close()
                raise Blocked(f"Refused: connected to {connected}, not {address}.")
            return stream
        assert error is not None
        raise error

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        raise Blocked("Refused: unix sockets are not reachable from HTTP tools.")


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """certifi's CAs, loaded once (a context is safe to share between threads)."""
    return httpx.create_ssl_context(trust_env=False)


class GuardedTransport(httpx.HTTPTransport):
    """httpx's transport with the guarded backend and no proxy.

    httpx does not let a caller choose the network backend, so the connection
    pool that ``HTTPTransport`` builds is replaced by an identical one that
    uses :class:`GuardedBackend` (httpx is pinned; a test covers this).
    """

    def __init__(
        self, guard: Guard, *, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        context = ssl_context or default_ssl_context()
        super().__init__(verify=context, trust_env=False)
        self._pool.close()
        self._pool = httpcore.ConnectionPool(
            ssl_context=context,
            max_connections=10,
            max_keepalive_connections=5,
            keepalive_expiry=5.0,
            network_backend=GuardedBackend(guard),
        )


def guarded_client(
    guard: Guard, *, timeout: float, ssl_context: ssl.SSLContext | None = None
) -> httpx.Client:
    """A client that follows no redirect, ignores proxies and checks each peer."""
    return httpx.Client(
        transport=GuardedTransport(guard, ssl_context=ssl_context),
        trust_env=False,
        follow_redirects=False,
        timeout=httpx.Timeout(timeout),
        headers={"User-Agent": "AgentReach/1 (HTTP tool)"},
    )
