"""Log out everywhere on the real web server: alice's sockets of two sessions
close within seconds of her pressing the button in a third, and reconnecting
with either session is refused."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.support.browser import real_password
from tests.support.cast import PASSWORD
from tests.support.clients import session_cookie
from tests.support.runs import start
from tests.support.stack import Stack

pytestmark = [pytest.mark.integration]

CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def form_login(base_url: str, username: str) -> httpx.Client:
    """A client logged in through the login form, as a browser is."""
    client = httpx.Client(base_url=base_url, timeout=10)
    token = CSRF.search(client.get("/accounts/login/").text).group(1)
    response = client.post(
        "/accounts/login/",
        data={"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token},
        headers={"Referer": base_url + "/accounts/login/"},
    )
    assert response.status_code == 302 and response.headers["location"] == "/"
    return client


def closed_with(ws, *, within: float) -> int | None:
    """Read until the server closes the socket; its close code (None: not in time)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            ws.recv(timeout=max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            return None
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None
    return None


def test_log_out_everywhere_closes_every_open_socket_of_the_user(
    stack: Stack, alice, demo, flush_redis
):
    real_password(alice, PASSWORD)
    stack.start_web()
    task = start(alice, demo.agent)
    ws_url = stack.web_url.replace("http", "ws") + f"/ws/tasks/{task.pk}/"
    cookies = [session_cookie(alice), session_cookie(alice)]
    sockets = [
        connect(
            ws_url,
            additional_headers={"Cookie": f"sessionid={c}", "Origin": stack.web_url},
            open_timeout=10,
        )
        for c in cookies
    ]
    try:
        for ws in sockets:
            assert closed_with(ws, within=0.5) is None  # open and live
        browser = form_login(stack.web_url, "alice")
        page = browser.get("/accounts/sessions/")
        pressed = time.monotonic()
        done = browser.post(
            "/accounts/sessions/",
            data={"csrfmiddlewaretoken": CSRF.search(page.text).group(1)},
            headers={"Referer": stack.web_url + "/accounts/sessions/"},
        )
        assert (
            done.status_code == 302 and done.headers["location"] == "/accounts/login/"
        )

        for ws in sockets:
            assert closed_with(ws, within=5) == 4401
        assert time.monotonic() - pressed < 5
    finally:
        for ws in sockets:
            ws.close()

    for cookie in cookies:
        with (
            pytest.raises((InvalidStatus, ConnectionClosed)),
            connect(
                ws_url,
                additional_headers={
                    "Cookie": f"sessionid={cookie}",
                    "Origin": stack.web_url,
                },
                open_timeout=10,
            ) as ws,
        ):
            ws.recv(timeout=5)
