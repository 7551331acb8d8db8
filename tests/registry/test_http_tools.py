"""HTTP tools against local servers: templates, secrets, answers, retries, keys."""

from __future__ import annotations

import time
from typing import Any

import pytest

from engine.execution import Executor, RetryableToolError, ToolError
from engine.spec import CallContext
from registry.adapters.http import http_handler, http_settings_errors, leaves_house
from registry.models import Tool
from registry.services import spec_for, tool_clean
from tests.support.http_servers import Reply, Sequence, echo, redirect
from tests.support.http_tools import PARAMETERS, call, http_tool

SECRET = "s3cr3t-token-value-0042"


def run_with_executor(tool: Tool, arguments: dict[str, Any], key: str = "t:1:0") -> Any:
    """Run through the engine's executor (timeouts, retries), without backoff."""
    spec = spec_for(tool)
    executor = Executor(backoff_base_s=0.0, sleep=lambda _s: None)
    try:
        context = CallContext("t", 1, key, spec, time.monotonic() + spec.timeout_s)
        return executor.run(spec, http_handler(tool), arguments, context)
    finally:
        executor.shutdown()


# -- method and templates ---------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
def test_the_configured_method_is_sent(local_server, method):
    server = local_server()
    result = call(http_tool(server.url("/things"), method=method), {})
    assert server.hits[0].method == method
    assert result["method"] == method


def test_a_url_parameter_is_percent_encoded_including_slash_and_non_ascii(
    local_server,
):
    server = local_server()
    tool = http_tool(server.url("/files/{path}/raw"))
    call(tool, {"path": "docs/报告 a?b#c"})
    assert server.hits[0].target == ("/files/docs%2F%E6%8A%A5%E5%91%8A%20a%3Fb%23c/raw")


def test_a_url_parameter_cannot_add_path_segments_or_change_the_host(local_server):
    server = local_server()
    tool = http_tool(server.url("/users/{keyword}"))
    call(tool, {"keyword": "../../admin@evil.example:80"})
    assert server.hits[0].path == "/users/..%2F..%2Fadmin%40evil.example%3A80"


def test_query_templates_are_filled_from_the_arguments(local_server):
    server = local_server()
    tool = http_tool(
        server.url("/search?fixed=1"),
        query={"q": "{keyword}", "label": "tag-{count}", "limit": "10"},
    )
    call(tool, {"keyword": "Redis & 缓存/热点", "count": 3})
    assert server.hits[0].query == {
        "fixed": ["1"],
        "q": ["Redis & 缓存/热点"],
        "label": ["tag-3"],
        "limit": ["10"],
    }


def test_a_left_out_optional_argument_drops_its_query_parameter_and_header(
    local_server,
):
    server = local_server()
    tool = http_tool(
        server.url("/search"),
        query={"q": "{keyword}", "author": "{author}"},
        headers={"X-Title": "{title}"},
    )
    call(tool, {"keyword": "redis"})
    hit = server.hits[0]
    assert hit.query == {"q": ["redis"]}
    assert "x-title" not in hit.headers


def test_header_templates_are_filled_from_the_arguments(local_server):
    server = local_server()
    tool = http_tool(
        server.url("/"), headers={"X-Author": "by {author}", "X-Count": "{count}"}
    )
    call(tool, {"author": "Zoë", "count": 7})
    assert server.hits[0].headers["x-count"] == "7"
    assert server.hits[0].headers["x-author"].encode("latin-1").decode() == "by Zoë"


def test_a_header_value_with_a_line_break_is_refused(local_server):
    server = local_server()
    tool = http_tool(server.url("/"), headers={"X-Title": "{title}"})
    with pytest.raises(ToolError, match="line break"):
        call(tool, {"title": "a\r\nX-Injected: 1"})
    assert server.hits == []


def test_a_json_body_template_takes_json_values_for_whole_placeholders(local_server):
    server = local_server()
    tool = http_tool(
        server.url("/items"),
        method="POST",
        body={
            "title": "{title}",
            "count": "{count}",
            "tags": "{tags}",
            "note": "by {author}, {count} of them",
            "fixed": [1, True, None],
            "nested": {"keyword": "{keyword}"},
        },
    )
    call(tool, {"title": "标题", "count": 5, "tags": ["a", "b"], "author": "bob"})
    hit = server.hits[0]
    assert hit.headers["content-type"] == "application/json"
    assert hit.json() == {
        "title": "标题",
        "count": 5,
        "tags": ["a", "b"],
        "note": "by bob, 5 of them",
        "fixed": [1, True, None],
        "nested": {},
    }


def test_a_get_without_a_body_template_sends_no_body(local_server):
    server = local_server()
    call(http_tool(server.url("/")), {})
    assert server.hits[0].body == b""
    assert "content-type" not in server.hits[0].headers


def test_filled_in_values_are_never_scanned_again(local_server, monkeypatch):
    monkeypatch.setenv("REACH_SECRET_ECHO_TOKEN", SECRET)
    server = local_server()
    tool = http_tool(
        server.url("/p/{keyword}"),
        method="POST",
        query={"q": "{keyword}"},
        headers={"X-Title": "{title}", "Authorization": "Bearer {{secret:ECHO_TOKEN}}"},
        body={"title": "{title}", "text": "say {keyword}"},
    )
    sneaky = "{{secret:ECHO_TOKEN}}"
    call(tool, {"keyword": sneaky, "title": "{keyword}"})
    hit = server.hits[0]
    assert hit.path == "/p/%7B%7Bsecret%3AECHO_TOKEN%7D%7D"
    assert hit.query == {"q": [sneaky]}
    assert hit.headers["x-title"] == "{keyword}"
    assert hit.json() == {"title": "{keyword}", "text": f"say {sneaky}"}
    assert hit.headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in hit.target and SECRET.encode() not in hit.body


def test_a_missing_argument_needed_by_the_url_is_an_error_for_the_model(local_server):
    server = local_server()
    with pytest.raises(ToolError, match="'path' is needed"):
        call(http_tool(server.url("/files/{path}")), {})
    assert server.hits == []


# -- secrets --------------------------------------------------------------------------


def test_a_secret_from_the_environment_fills_a_header(local_server, monkeypatch):
    monkeypatch.setenv("REACH_SECRET_API_TOKEN", SECRET)
    server = local_server()
    tool = http_tool(
        server.url("/"), headers={"Authorization": "Bearer {{secret:API_TOKEN}}"}
    )
    call(tool, {})
    assert server.hits[0].headers["authorization"] == f"Bearer {SECRET}"


@pytest.mark.django_db(transaction=True)
def test_a_secret_from_the_store_fills_a_header(local_server):
    from registry.secrets import secret_set

    secret_set(name="STORE_TOKEN", value=SECRET)
    server = local_server()
    tool = http_tool(server.url("/"), headers={"X-Api-Key": "{{secret:STORE_TOKEN}}"})
    call(tool, {})
    assert server.hits[0].headers["x-api-key"] == SECRET


@pytest.mark.django_db(transaction=True)
def test_the_environment_wins_over_the_store(local_server, monkeypatch):
    from registry.secrets import secret_set

    secret_set(name="BOTH_TOKEN", value="stored-value-123456")
    monkeypatch.setenv("REACH_SECRET_BOTH_TOKEN", "environment-value-654321")
    server = local_server()
    tool = http_tool(server.url("/"), headers={"X-Api-Key": "{{secret:BOTH_TOKEN}}"})
    call(tool, {})
    assert server.hits[0].headers["x-api-key"] == "environment-value-654321"


@pytest.mark.django_db(transaction=True)
def test_a_missing_secret_is_an_error_that_names_it(local_server):
    server = local_server()
    tool = http_tool(server.url("/"), headers={"X-Api-Key": "{{secret:ABSENT_KEY}}"})
    with pytest.raises(ToolError, match="secret ABSENT_KEY is not set"):
        call(tool, {})
    assert server.hits == []


def test_a_secret_reference_outside_headers_is_never_resolved(
    local_server, monkeypatch
):
    monkeypatch.setenv("REACH_SECRET_API_TOKEN", SECRET)
    server = local_server()
    tool = http_tool(
        server.url("/x/{{secret:API_TOKEN}}"),
        method="POST",
        query={"k": "{{secret:API_TOKEN}}"},
        body={"k": "{{secret:API_TOKEN}}"},
    )
    call(tool, {})
    hit = server.hits[0]
    assert SECRET not in hit.target and SECRET.encode() not in hit.body
    assert hit.json() == {"k": "{{secret:API_TOKEN}}"}


def test_a_secret_echoed_in_an_error_excerpt_is_redacted(local_server, monkeypatch):
    secret = "excerpt-secret-value-7781"
    monkeypatch.setenv("REACH_SECRET_EXCERPT_TOKEN", secret)
    server = local_server(lambda hit: Reply(400, text=f"bad token {secret}"))
    tool = http_tool(server.url("/"), headers={"X-Api-Key": "{{secret:EXCERPT_TOKEN}}"})
    with pytest.raises(ToolError) as raised:
        call(tool, {})
    assert secret not in str(raised.value)
    assert "bad token [REDACTED:EXCERPT_TOKEN]" in str(raised.value)


# -- answers ---------------------------------------------------------------------


def test_response_fields_select_what_reaches_the_model(local_server):
    data = {
        "items": [{"id": 1, "name": "a"}],
        "total": 1,
        "debug": {"internal": "x"},
        "page": {"next": "/p2", "size": 20},
    }
    server = local_server(lambda hit: Reply(data=data))
    tool = http_tool(
        server.url("/"), response_fields=["/items", "/total", "/page/next"]
    )
    assert call(tool, {}) == {
        "items": [{"id": 1, "name": "a"}],
        "total": 1,
        "page": {"next": "/p2"},
    }


def test_response_fields_apply_to_each_item_of_a_list_answer(local_server):
    rows = [{"id": 1, "name": "a", "extra": 1}, {"id": 2, "name": "b", "extra": 2}]
    server = local_server(lambda hit: Reply(data=rows))
    tool = http_tool(server.url("/"), response_fields=["/id", "/name"])
    assert call(tool, {}) == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]


def test_a_non_json_answer_comes_back_as_status_and_the_first_characters(
    local_server, settings
):
    settings.REACH_HTTP_TEXT_CHARS = 50
    page = "<html>" + "x" * 500 + "</html>"
    server = local_server(lambda hit: Reply(201, text=page, content_type="text/html"))
    assert call(http_tool(server.url("/")), {}) == {"status": 201, "text": page[:50]}


def test_an_error_status_is_a_tool_error_with_the_status_and_an_excerpt(local_server):
    server = local_server(lambda hit: Reply(404, data={"error": "no such user: 42"}))
    with pytest.raises(ToolError) as raised:
        call(http_tool(server.url("/users/42")), {})
    assert not isinstance(raised.value, RetryableToolError)
    assert "HTTP 404" in str(raised.value)
    assert "no such user: 42" in str(raised.value)


def test_a_response_larger_than_the_limit_is_refused(local_server, settings):
    settings.REACH_HTTP_MAX_RESPONSE_BYTES = 1000
    server = local_server(lambda hit: Reply(text="y" * 5000))
    with pytest.raises(ToolError, match="larger than 1000 bytes"):
        call(http_tool(server.url("/")), {})


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_throttling_and_gateway_statuses_are_retryable(local_server, status):
    server = local_server(lambda hit: Reply(status, text="busy"))
    with pytest.raises(RetryableToolError, match=f"HTTP {status}"):
        call(http_tool(server.url("/")), {})


def test_a_refused_connection_is_retryable(local_server):
    server = local_server()
    url = server.url("/")
    server.stop()
    with pytest.raises(RetryableToolError, match="Could not reach"):
        call(http_tool(url), {})


def test_a_server_slower_than_the_timeout_is_a_retryable_timeout(local_server):
    server = local_server(lambda hit: (server.released.wait(30), Reply())[1])
    started = time.monotonic()
    with pytest.raises(RetryableToolError, match="did not answer in time"):
        call(http_tool(server.url("/"), timeout_s=0.3), {})
    assert time.monotonic() - started < 5


def test_redirects_are_followed_within_the_allowed_hosts(local_server):
    server = local_server(
        lambda hit: redirect("/final") if hit.path == "/start" else echo(hit)
    )
    result = call(http_tool(server.url("/start")), {})
    assert [h.path for h in server.hits] == ["/start", "/final"]
    assert result["path"] == "/final"


def test_a_303_after_a_post_is_followed_with_a_get_and_no_body(local_server):
    server = local_server(
        lambda hit: redirect("/done", 303) if hit.path == "/create" else echo(hit)
    )
    tool = http_tool(server.url("/create"), method="POST", body={"t": "{title}"})
    call(tool, {"title": "x"})
    assert [(h.method, h.path, h.body) for h in server.hits] == [
        ("POST", "/create", b'{"t": "x"}'),
        ("GET", "/done", b""),
    ]


def test_secret_headers_are_dropped_when_a_redirect_changes_origin(
    local_server, monkeypatch
):
    monkeypatch.setenv("REACH_SECRET_API_TOKEN", SECRET)
    other = local_server(host="127.0.0.2")
    first = local_server(lambda hit: redirect(other.url("/elsewhere")))
    tool = http_tool(
        first.url("/"),
        ["127.0.0.1", "127.0.0.2"],
        headers={
            "X-Api-Key": "{{secret:API_TOKEN}}",
            "Authorization": "Bearer {{secret:API_TOKEN}}",
            "X-Plain": "kept",
        },
    )
    call(tool, {})
    assert first.hits[0].headers["x-api-key"] == SECRET
    moved = other.hits[0].headers
    assert "x-api-key" not in moved and "authorization" not in moved
    assert moved["x-plain"] == "kept"


# -- retries and idempotency keys ----------------------------------------------------


def test_a_get_is_retried_on_503_until_it_answers(local_server):
    server = local_server(
        Sequence([Reply(503, text="busy"), Reply(503, text="busy"), Reply(data={})])
    )
    result = run_with_executor(http_tool(server.url("/"), max_retries=3), {})
    assert result.ok, result.error
    assert len(server.hits) == 3
    assert [a.error_class for a in result.attempts] == ["transient", "transient", None]


def test_a_post_write_is_not_retried_on_503(local_server):
    server = local_server(lambda hit: Reply(503, text="busy"))
    tool = http_tool(
        server.url("/"), method="POST", risk=Tool.Risk.WRITE, max_retries=3
    )
    result = run_with_executor(tool, {})
    assert not result.ok
    assert result.error_class == "transient"
    assert len(server.hits) == 1


def test_an_idempotent_write_is_retried_with_the_same_idempotency_key(local_server):
    server = local_server(Sequence([Reply(503, text="busy"), Reply(data={"ok": 1})]))
    tool = http_tool(
        server.url("/"),
        method="POST",
        risk=Tool.Risk.WRITE,
        idempotent=True,
        max_retries=2,
    )
    result = run_with_executor(tool, {}, key="task-9:4:1")
    assert result.ok, result.error
    assert [h.headers["idempotency-key"] for h in server.hits] == ["task-9:4:1"] * 2


@pytest.mark.parametrize("risk", [Tool.Risk.WRITE, Tool.Risk.IRREVERSIBLE])
def test_writes_send_the_call_idempotency_key(local_server, risk):
    server = local_server()
    call(http_tool(server.url("/"), method="POST", risk=risk), {}, key="task-7:3:0")
    assert server.hits[0].headers["idempotency-key"] == "task-7:3:0"


def test_reads_send_no_idempotency_key(local_server):
    server = local_server()
    call(http_tool(server.url("/")), {}, key="task-7:3:0")
    assert "idempotency-key" not in server.hits[0].headers


# -- inside or outside the house -------------------------------------------------------


@pytest.mark.parametrize(
    ("allowed", "internal", "leaves"),
    [
        (["127.0.0.1"], [], False),
        (["10.0.0.0/8", "::1"], [], False),
        (["api.example.com"], [], True),
        (["billing.internal"], ["billing.internal"], False),
        (["billing.internal", "api.example.com"], ["billing.internal"], True),
        (["203.0.113.9"], [], False),  # documentation range: not public
        (["8.8.8.8"], [], True),
        (["8.8.8.8"], ["8.8.8.0/24"], False),
        ([], [], True),
    ],
)
def test_a_tool_leaves_the_house_unless_every_allowed_host_is_internal(
    settings, allowed, internal, leaves
):
    settings.REACH_INTERNAL_HOSTS = internal
    tool = http_tool("http://x.example/", allowed)
    assert leaves_house(tool) is leaves
    assert spec_for(tool).leaves_house is leaves


# -- validation of the definition ----------------------------------------------------


def errors_of(http: dict[str, Any], **tool: Any) -> str:
    base = {"method": "GET", "url": "https://api.example.com/x"}
    base["allowed_hosts"] = ["api.example.com"]
    return " | ".join(http_settings_errors({**base, **http}, PARAMETERS, **tool))


@pytest.mark.parametrize(
    ("http", "message"),
    [
        ({"method": "TRACE"}, "method is one of GET, POST, PUT, PATCH, DELETE"),
        ({"url": "ftp://api.example.com/x"}, "only http and https"),
        ({"url": "file:///etc/passwd"}, "only http and https"),
        ({"url": "https://other.example.com/x"}, "not in allowed_hosts"),
        ({"url": "https://{keyword}.example.com/x"}, "may not appear in the URL's"),
        ({"url": "https://user:pw@api.example.com/"}, "credentials in the URL"),
        ({"url": "/relative"}, "must be absolute"),
        ({"url": "https://api.example.com/{nope}"}, "{nope} is not a declared"),
        ({"query": {"q": "{nope}"}}, "{nope} is not a declared"),
        ({"headers": {"X": "{nope}"}}, "{nope} is not a declared"),
        ({"body": {"a": ["{nope}"]}}, "{nope} is not a declared"),
        ({"query": {"q": "{{secret:TOKEN}}"}}, "in header templates only"),
        ({"body": {"k": "{{secret:TOKEN}}"}}, "in header templates only"),
        ({"url": "https://api.example.com/{{secret:T}}"}, "header templates only"),
        ({"headers": {"X": "{{secret:bad-name}}"}}, "malformed secret reference"),
        ({"headers": {"Idempotency-Key": "x"}}, "sends Idempotency-Key itself"),
        ({"headers": {"Bad Name": "x"}}, "not a valid header name"),
        ({"response_fields": ["items"]}, "response_fields are JSON pointers"),
        ({"allowed_hosts": []}, "allowed_hosts lists the hosts"),
        ({"allowed_hosts": ["api.example.com", "2130706433"]}, "as 127.0.0.1"),
        ({"allowed_hosts": ["api.example.com", "*.example.com"]}, "bare hosts"),
        ({"allowed_hosts": ["api.example.com:443"]}, "bare hosts"),
        ({"allowed_hosts": ["api.example.com", "0.0.0.0/0"]}, "too broad"),
        ({"timeout": 3}, "Unknown http settings: timeout"),
    ],
)
def test_invalid_http_settings_are_refused_with_a_reason(http, message):
    assert message.lower() in errors_of(http).lower()


def test_a_post_is_retried_only_when_it_honours_idempotency_keys():
    assert "mark it idempotent" in errors_of({"method": "POST"}, max_retries=2)
    assert errors_of({"method": "POST"}, max_retries=2, idempotent=True) == ""
    assert errors_of({"method": "GET"}, max_retries=2) == ""


def test_a_complete_definition_is_valid():
    http = {
        "method": "POST",
        "url": "https://api.example.com/v1/{path}/items?src=reach",
        "query": {"q": "{keyword}"},
        "headers": {"Authorization": "Bearer {{secret:EXAMPLE_TOKEN}}"},
        "body": {"title": "{title}", "count": "{count}"},
        "response_fields": ["/id", "/url"],
        "allowed_hosts": ["api.example.com", "10.0.0.0/8"],
    }
    assert http_settings_errors(http, PARAMETERS) == []


def test_tool_clean_reports_http_errors_under_http():
    tool = http_tool("gopher://127.0.0.1/", ["127.0.0.1"])
    errors = tool_clean(tool)
    assert any("only http and https" in m.lower() for m in errors["http"])
