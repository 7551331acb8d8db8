"""The gateway's parts in-process: the one-call model, and a wait that ends at its
bound while the call is still parked (the run advanced here, as the worker would)."""

from __future__ import annotations

import asyncio
import json

import pytest

from engine.spec import AgentSnapshot
from gateway.model_client import GATEWAY_KEY, GatewayCall, GatewayModel, gateway_model
from gateway.server import wait_for_outcome
from gateway.services import gateway_call_start
from registry.models import Agent
from tests.support.cast import EMAIL
from tests.support.runs import advance, pending


def test_the_model_proposes_the_call_then_answers_with_its_observation():
    call = GatewayCall(
        tool="calculate", arguments={"expression": "1 + 1"}, call_id="c1"
    )
    model = GatewayModel(call)
    messages = [{"role": "user", "content": "MCP call: calculate"}]

    first = model.complete(messages=messages, tools=[], model="m")
    assert [(c.call_id, c.name) for c in first.tool_calls] == [("c1", "calculate")]
    assert json.loads(first.tool_calls[0].raw_arguments) == {"expression": "1 + 1"}

    observed = [
        *messages,
        first.message,
        {"role": "tool", "tool_call_id": "c1", "content": "2"},
    ]
    final = model.complete(messages=observed, tools=[], model="m")
    assert final.tool_calls == [] and final.content == "2"


def test_only_gateway_runs_get_the_gateway_model():
    assert gateway_model(snapshot=AgentSnapshot()) is None
    marked = AgentSnapshot(extra={GATEWAY_KEY: {"tool": "calculate", "arguments": {}}})
    assert isinstance(gateway_model(snapshot=marked), GatewayModel)


@pytest.mark.django_db(transaction=True)
def test_a_call_still_parked_at_the_bound_says_it_waits_with_the_approval_id(
    demo, alice, settings, flush_redis
):
    settings.REACH_MCP_MAX_WAIT_S = 0.5
    task = gateway_call_start(
        user=alice, agent=demo.agent, tool="send_email", arguments=EMAIL
    )
    parked = advance(task)
    assert parked.status == "waiting_approval"
    (approval,) = pending(parked)

    outcome = asyncio.run(wait_for_outcome(task.pk, poll_s=0.05))
    assert not outcome.done and outcome.is_error
    assert outcome.approval_id == str(approval.pk)
    assert str(approval.pk) in outcome.text and "approval" in outcome.text


def test_the_stdio_command_is_mcp_serve_and_answers_to_its_earlier_name_too():
    from django.core.management import load_command_class

    serve = load_command_class("gateway", "mcp_serve")
    earlier = load_command_class("gateway", "mcp_gateway")
    assert type(serve) is type(earlier)
    assert "stdio" in serve.help


@pytest.mark.django_db
def test_the_gateway_serves_an_agent_only_to_those_who_may_use_it(alice, bob, demo):
    from gateway.services import GatewayError, gateway_agent

    demo.agent.allowed_users.add(alice)
    # The demo's other agents (triage, which hands off to the assistant, and the
    # extractor, whose answer is structured) too.
    for name in ("triage", "extractor"):
        Agent.objects.get(name=name).allowed_users.add(alice)
    assert gateway_agent(name=demo.agent.name, user=alice) == demo.agent
    with pytest.raises(GatewayError, match="may not use the agent"):
        gateway_agent(name=demo.agent.name, user=bob)
    # Nor as the default: bob has no agent he may use.
    with pytest.raises(GatewayError):
        gateway_agent(user=bob)
