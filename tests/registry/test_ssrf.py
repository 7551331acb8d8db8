"""The SSRF guard: every way a request could reach what it must not.

The local servers are on loopback, so a test that must reach one lists
``127.0.0.1`` in allowed_hosts; the same server is refused when it is not listed.
Names such as ``rebind.example`` are answered by the test resolver (the guard's
``resolve`` function, the one seam), never by a network.
"""

from __future__ import annotations

import ipaddress
import re

import pytest

from engine.execution import RetryableToolError, ToolError
from registry.adapters import ssrf
from registry.adapters.ssrf import Blocked
from tests.support.http_servers import echo, redirect, tls_files
from tests.support.http_tools import call, http_tool

# -- reading addresses ----------------------------------------------------------------


@pytest.mark.parametrize(
    "form",
    ["2130706433", "0177.0.0.1", "0x7f.1", "0x7f000001", "127.1", "0177.1", "127.0.1"],
)
def test_decimal_octal_and_hex_ipv4_forms_are_read_as_the_address_they_name(form):
    assert ssrf.as_address(form) == ipaddress.ip_address("127.0.0.1")


@pytest.mark.parametrize("form", ["::ffff:127.0.0.1", "[::ffff:7f00:1]"])
def test_ipv4_mapped_ipv6_is_read_as_its_ipv4_address(form):
    assert ssrf.as_address(form) == ipaddress.ip_address("127.0.0.1")


@pytest.mark.parametrize("name", ["example.com", "cafe.be", "0x.example", "1.2.3.4.5"])
def test_hostnames_are_not_mistaken_for_addresses(name):
    assert ssrf.as_address(name) is None


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "shared (CGNAT)"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "cloud metadata"),
        ("::127.0.0.1", "loopback"),
        ("64:ff9b::7f00:1", "loopback"),
        ("64:ff9b::a9fe:a9fe", "cloud metadata"),
        ("2002:7f00:1::", "loopback"),
        ("2002:a00:1::", "private"),
        ("240.0.0.1", "private"),
        ("8.8.8.8", None),
        ("2001:4860:4860::8888", None),
    ],
)
def test_every_non_public_address_is_named(address, problem):
    assert ssrf.address_problem(ipaddress.ip_address(address)) == problem


# -- the URL's host -----------------------------------------------------------------


def test_a_url_whose_host_is_not_allowed_is_refused(local_server):
    server = local_server()
    with pytest.raises(Blocked, match="not in allowed_hosts"):
        call(http_tool(server.url("/"), ["api.example.com"]), {})
    assert server.hits == []


def test_loopback_is_reached_when_allowed_hosts_lists_it(local_server):
    server = local_server()
    call(http_tool(server.url("/"), ["127.0.0.1"]), {})
    assert len(server.hits) == 1


def test_the_same_loopback_server_is_refused_when_it_is_not_listed(local_server):
    server = local_server()
    with pytest.raises(Blocked, match="127.0.0.1 is not in allowed_hosts"):
        call(http_tool(server.url("/"), ["127.0.0.2", "api.example.com"]), {})
    assert server.hits == []


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "gopher://127.0.0.1:{port}/_GET%20/",
        "ftp://127.0.0.1:{port}/",
        "dict://127.0.0.1:{port}/info",
    ],
)
def test_schemes_other_than_http_and_https_are_refused(local_server, url):
    server = local_server()
    with pytest.raises(Blocked, match="only http and https"):
        call(http_tool(url.format(port=server.port), ["127.0.0.1"]), {})
    assert server.hits == []


def test_credentials_in_the_url_are_refused(local_server):
    server = local_server()
    url = f"http://user:pw@127.0.0.1:{server.port}/"
    with pytest.raises(Blocked, match="credentials"):
        call(http_tool(url, ["127.0.0.1"]), {})
    assert server.hits == []


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "0x7f000001", "127.1"])
def test_a_numeric_form_of_a_listed_address_reaches_only_that_address(
    local_server, host
):
    server = local_server()
    call(http_tool(server.url("/", host=host), ["127.0.0.1"]), {})
    assert len(server.hits) == 1


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "0177.0.0.1", "127.1"])
def test_a_numeric_form_of_loopback_is_refused_when_loopback_is_not_listed(
    local_server, host
):
    server = local_server()
    # Written the same odd way in allowed_hosts: such an entry never matches.
    tool = http_tool(server.url("/", host=host), [host, "api.example.com"])
    with pytest.raises(Blocked):
        call(tool, {})
    assert server.hits == []


def test_an_ipv4_mapped_ipv6_url_is_refused_unless_the_ipv4_is_listed(local_server):
    server = local_server()
    url = server.url("/", host="[::ffff:127.0.0.1]")
    with pytest.raises(Blocked, match="127.0.0.1 is not in allowed_hosts"):
        call(http_tool(url, ["api.example.com"]), {})
    assert server.hits == []
    call(http_tool(url, ["127.0.0.1"]), {})
    assert len(server.hits) == 1


def test_the_metadata_address_is_refused_even_inside_an_allowed_network():
    tool = http_tool("http://169.254.169.254/latest/meta-data/", ["169.254.0.0/16"])
    with pytest.raises(Blocked, match="cloud metadata"):
        call(tool, {})


def test_a_metadata_hostname_is_refused_even_when_listed(dns):
    dns.set("metadata.google.internal", ["169.254.169.254"])
    tool = http_tool(
        "http://metadata.google.internal/computeMetadata/v1/",
        ["metadata.google.internal"],
    )
    with pytest.raises(Blocked, match="cloud metadata"):
        call(tool, {})
    assert dns.lookups == []


# -- the address connected --------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "answers", "refusal"),
    [
        pytest.param(
            "rebind.example",
            ["127.0.0.1"],
            r"rebind.example resolves to 127.0.0.1 \(loop",
            id="a hostname that resolves to loopback",
        ),
        pytest.param(
            "localhost",
            ["127.0.0.1", "::1"],
            "loopback",
            id="localhost, unless its address is listed",
        ),
        pytest.param(
            "rebind.example",
            ["93.184.216.34", "127.0.0.1"],
            "127.0.0.1 \\(loopback\\)",
            id="one private answer among public ones",
        ),
    ],
)
def test_a_listed_name_resolving_to_loopback_is_refused_before_connecting(
    local_server, dns, name, answers, refusal
):
    server = local_server()
    dns.set(name, answers)
    tool = http_tool(server.url("/", host=name), [name])
    with pytest.raises(Blocked, match=refusal):
        call(tool, {})
    assert server.hits == []


def test_the_connection_goes_to_the_checked_address_without_a_second_lookup(
    local_server, dns
):
    server = local_server()
    dns.set("rebind.example", ["127.0.0.1"])
    url = server.url("/", host="rebind.example")
    # The system resolver cannot answer for rebind.example: reaching the
    # server proves the connection used the address the guard checked.
    call(http_tool(url, ["rebind.example", "127.0.0.1"]), {})
    assert len(server.hits) == 1
    assert server.hits[0].headers["host"] == f"rebind.example:{server.port}"
    assert dns.lookups == ["rebind.example"]


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ("10.0.0.7", "private"),
        ("192.168.0.10", "private"),
        ("100.64.1.1", "shared (CGNAT)"),
        ("169.254.10.10", "link-local"),
        ("169.254.169.254", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("fc00::5", "private"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.251", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
    ],
)
def test_a_name_resolving_to_a_non_public_address_is_refused(dns, answer, problem):
    dns.set("innocent.example", [answer])
    tool = http_tool("http://innocent.example/data", ["innocent.example"])
    with pytest.raises(Blocked, match=re.escape(f"({problem})")):
        call(tool, {})


def test_a_name_may_resolve_inside_a_network_that_allowed_hosts_lists(
    local_server, dns
):
    server = local_server()
    dns.set("svc.example", ["127.0.0.1"])
    tool = http_tool(
        server.url("/", host="svc.example"), ["svc.example", "127.0.0.0/8"]
    )
    call(tool, {})
    assert len(server.hits) == 1


def test_an_internal_host_may_resolve_to_a_private_address(local_server, dns, settings):
    settings.REACH_INTERNAL_HOSTS = ["billing.internal"]
    server = local_server()
    dns.set("billing.internal", ["127.0.0.1"])
    call(http_tool(server.url("/", host="billing.internal"), ["billing.internal"]), {})
    assert len(server.hits) == 1


def test_an_internal_host_still_may_not_resolve_to_the_metadata_address(dns, settings):
    settings.REACH_INTERNAL_HOSTS = ["billing.internal"]
    dns.set("billing.internal", ["169.254.169.254"])
    tool = http_tool("http://billing.internal/", ["billing.internal"])
    with pytest.raises(Blocked, match="cloud metadata"):
        call(tool, {})


# -- redirects ------------------------------------------------------------------------


def test_a_redirect_to_a_host_that_is_not_allowed_is_refused(local_server):
    forbidden = local_server(host="127.0.0.2")
    first = local_server(lambda hit: redirect(forbidden.url("/secret")))
    with pytest.raises(Blocked, match="127.0.0.2 is not in allowed_hosts"):
        call(http_tool(first.url("/"), ["127.0.0.1"]), {})
    assert len(first.hits) == 1
    assert forbidden.hits == []


def test_a_redirect_to_a_decimal_form_of_a_forbidden_address_is_refused(local_server):
    forbidden = local_server(host="127.0.0.2")
    decimal = str(int(ipaddress.ip_address("127.0.0.2")))
    first = local_server(lambda hit: redirect(forbidden.url("/", host=decimal)))
    with pytest.raises(Blocked, match="127.0.0.2 is not in allowed_hosts"):
        call(http_tool(first.url("/"), ["127.0.0.1"]), {})
    assert forbidden.hits == []


@pytest.mark.parametrize(
    "location",
    [
        "http://169.254.169.254/latest/meta-data/iam/",
        "http://[fd00:ec2::254]/latest/",
        "file:///etc/passwd",
        "gopher://127.0.0.1:70/_x",
        "http://metadata.google.internal/",
    ],
)
def test_a_redirect_to_metadata_or_another_scheme_is_refused(local_server, location):
    first = local_server(lambda hit: redirect(location))
    with pytest.raises(Blocked):
        call(http_tool(first.url("/"), ["127.0.0.1"]), {})
    assert len(first.hits) == 1


def test_a_redirect_to_an_allowed_name_resolving_to_loopback_is_refused(
    local_server, dns
):
    first = local_server(
        lambda hit: redirect(f"http://docs.example:{first.port}/moved")
    )
    hidden = local_server(host="127.0.0.2", port=first.port)
    dns.set("docs.example", ["127.0.0.2"])
    tool = http_tool(first.url("/"), ["127.0.0.1", "docs.example"])
    with pytest.raises(Blocked, match="docs.example resolves to 127.0.0.2"):
        call(tool, {})
    assert len(first.hits) == 1
    assert hidden.hits == []


def test_dns_rebinding_between_hops_is_caught_at_the_next_connection(local_server, dns):
    # First answer: the explicitly allowed 127.0.0.1. The same name then
    # rebinds to 127.0.0.2, where another server listens on the same port.
    first = local_server(
        lambda hit: redirect("/next") if hit.path == "/start" else echo(hit)
    )
    target = local_server(host="127.0.0.2", port=first.port)
    dns.set("rebind.example", ["127.0.0.1"], ["127.0.0.2"])
    tool = http_tool(
        first.url("/start", host="rebind.example"), ["rebind.example", "127.0.0.1"]
    )
    with pytest.raises(Blocked, match="rebind.example resolves to 127.0.0.2"):
        call(tool, {})
    assert [h.path for h in first.hits] == ["/start"]
    assert target.hits == []
    assert dns.lookups == ["rebind.example", "rebind.example"]


def test_redirects_stop_after_five_hops(local_server):
    server = local_server(lambda hit: redirect("/again"))
    with pytest.raises(Exception, match="Too many redirects"):
        call(http_tool(server.url("/"), ["127.0.0.1"]), {})
    assert len(server.hits) == 6


def test_https_checks_the_certificate_of_the_name_while_connecting_to_the_address(
    local_server, dns, settings, tmp_path
):
    ca_path, tls, asked = tls_files(tmp_path, ["secure.example"])
    server = local_server(tls=tls)
    settings.REACH_HTTP_CA_BUNDLE = str(ca_path)
    dns.set("secure.example", ["127.0.0.1"])
    url = server.url("/", host="secure.example")
    result = call(http_tool(url, ["secure.example", "127.0.0.1"]), {})
    assert result["headers"]["host"] == f"secure.example:{server.port}"
    assert asked == ["secure.example"]
    # The same server under a name its certificate does not carry: refused.
    dns.set("other.example", ["127.0.0.1"])
    other = server.url("/", host="other.example")
    with pytest.raises(ToolError, match="failed TLS verification") as raised:
        call(http_tool(other, ["other.example", "127.0.0.1"]), {})
    assert not isinstance(raised.value, RetryableToolError)
    assert len(server.hits) == 1


# -- the environment ----------------------------------------------------------------


def test_proxies_from_the_environment_are_ignored(local_server, monkeypatch):
    proxy = local_server(host="127.0.0.2")
    target = local_server()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, proxy.url("/"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    call(http_tool(target.url("/"), ["127.0.0.1"]), {})
    assert len(target.hits) == 1
    assert proxy.hits == []


# -- allowed_hosts entries ----------------------------------------------------------


@pytest.mark.parametrize(
    "entry",
    [
        "api.example.com",
        "API.Example.com.",
        "127.0.0.1",
        "::1",
        "10.0.0.0/8",
        "bücher.de",
    ],
)
def test_plain_hosts_addresses_and_networks_are_valid_entries(entry):
    assert ssrf.parse_entry(entry).problem is None


@pytest.mark.parametrize(
    "entry",
    ["2130706433", "0x7f.1", "*.example.com", "example.com:8080", "http://x.com", ""],
)
def test_odd_or_ambiguous_entries_are_invalid(entry):
    assert ssrf.parse_entry(entry).problem is not None
