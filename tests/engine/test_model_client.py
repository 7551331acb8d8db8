"""The real model client (the ``openai`` SDK) against endpoints that are not there."""

from __future__ import annotations

import pytest

from engine.model_client import ModelError, OpenAIModelClient, UnavailableModel
from engine.spec import ErrorClass
from tests.support.ports import free_port

HELLO = [{"role": "user", "content": "hi"}]


def test_a_closed_loopback_port_is_a_connection_error_naming_the_endpoint():
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    client = OpenAIModelClient(
        base_url=base_url, api_key="k", max_retries=1, sleep=lambda _: None
    )
    with pytest.raises(ModelError) as caught:
        client.complete(messages=HELLO, tools=[], model="m")
    error = caught.value
    assert error.kind == ErrorClass.CONNECTION
    assert base_url in str(error) and "unreachable" in str(error)
    # The OS's reason, not only the SDK's "Connection error.".
    assert "refused" in str(error).lower()
    assert "OPENAI_BASE_URL" in str(error)
    assert [a.error_class for a in error.attempts] == [ErrorClass.CONNECTION] * 2


def test_a_base_url_that_does_not_parse_is_a_model_error_not_a_crash():
    with pytest.raises(ModelError) as caught:
        OpenAIModelClient(base_url="http://[::1/v1", api_key="k")
    assert caught.value.kind == ErrorClass.CONNECTION
    assert "http://[::1/v1" in str(caught.value)
    assert "OPENAI_BASE_URL" in str(caught.value)


def test_an_unavailable_model_fails_every_call_with_its_reason_as_one_attempt():
    reason = ModelError("No model endpoint.", kind=ErrorClass.CONNECTION, attempts=[])
    model = UnavailableModel(reason)
    with pytest.raises(ModelError) as caught:
        model.complete(messages=HELLO, tools=[], model="m")
    assert str(caught.value) == "No model endpoint."
    assert caught.value.kind == ErrorClass.CONNECTION
    [attempt] = caught.value.attempts
    assert attempt.error == "No model endpoint." and attempt.error_class == "connection"
