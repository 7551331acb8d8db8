"""Handoffs in the engine alone (engine.handoff): no Django, a port of dicts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.handoff import (
    HandoffRecord,
    HandoffRefused,
    acting_agent,
    tightened,
    transfer_specs,
)
from engine.loop import Engine
from engine.planning import Planner
from engine.replay import RecordedRun, rerun
from engine.spec import (
    AgentSnapshot,
    ErrorClass,
    Limits,
    StepKind,
    StepRecord,
    StepStatus,
    StopReason,
    Toolbox,
    ToolCall,
)
from tests.support.engine_doubles import (
    FakeModel,
    calculate_handler,
    calculator_spec,
    journal,
    make_engine,
    model_calls,
    tool_steps,
)
from tests.support.replies import text, tool_call


def snapshot(name: str, *targets: str, **limits: Any) -> AgentSnapshot:
    return AgentSnapshot(
        name=name,
        model=f"{name}-model",
        instructions=f"You are {name}.",
        limits=Limits(**limits) if limits else None,
        tools=({"name": "calculate", **_definition()},) if name == "billing" else (),
        handoffs=tuple({"agent": t, "description": f"to {t}"} for t in targets),
    )


def _definition() -> dict[str, Any]:
    spec = calculator_spec()
    return {"description": spec.description, "parameters": dict(spec.parameters)}


class Port:
    """The Handoffs port over a dict of agents; ``refuse`` names forbidden ones."""

    def __init__(
        self, agents: dict[str, AgentSnapshot], refuse: set[str] | None = None
    ) -> None:
        self.agents = agents
        self.refuse = refuse or set()
        self.recorded: list[StepRecord] = []

    def transfer(self, *, target: str, source: AgentSnapshot) -> AgentSnapshot:
        if target in self.refuse:
            raise HandoffRefused(f"not {target}")
        return self.agents[target]

    def toolbox(self, agent: AgentSnapshot) -> Toolbox:
        specs = agent.specs()
        return Toolbox(specs=specs, handlers={n: calculate_handler for n in specs})

    def handed_off(self, step: StepRecord) -> None:
        self.recorded.append(step)


def engine_for(
    model: FakeModel, port: Port, start: AgentSnapshot, **limits: Any
) -> Engine:
    """An engine whose run starts with ``start`` and hands off through ``port``."""
    return replace(
        make_engine(model, {}, limits=Limits(**limits)),
        agent=start,
        handoffs=lambda: port,
    )


def test_a_snapshot_records_its_handoff_targets_only_when_it_has_some():
    plain = AgentSnapshot(name="a")
    assert "handoffs" not in plain.to_json()
    desk = snapshot("desk", "billing")
    data = desk.to_json()
    assert data["handoffs"] == [{"agent": "billing", "description": "to billing"}]
    assert AgentSnapshot.from_json(data) == desk


def test_each_target_is_offered_as_a_transfer_tool_with_its_description():
    [spec] = transfer_specs(snapshot("desk", "billing")).values()
    assert spec.name == "transfer_to_billing"
    assert "to billing" in spec.description and "'billing'" in spec.description
    assert spec.kind == "handoff" and spec.risk == "read_only"


def test_after_a_handoff_the_target_speaks_with_its_prompt_model_and_tools():
    billing = snapshot("billing", "desk")
    port = Port({"billing": billing})
    model = FakeModel(
        [
            tool_call("transfer_to_billing", {}),
            tool_call("calculate", {"expression": "6 * 7"}),
            text("42"),
        ]
    )
    j = journal(system="You are desk.")
    engine_for(model, port, snapshot("desk", "billing")).advance(j)

    assert j.finished[0] is StopReason.FINAL_ANSWER
    # The system prompt opens with the acting agent's instructions.
    assert [m[0]["content"].split("\n")[0] for m in model.requests] == [
        "You are desk.",
        "You are billing.",
        "You are billing.",
    ]
    assert [sorted(t["function"]["name"] for t in ts) for ts in model.tools_sent] == [
        ["transfer_to_billing"],
        ["calculate", "transfer_to_desk"],
        ["calculate", "transfer_to_desk"],
    ]
    assert [s.agent for s in j.steps] == [
        "desk",
        "desk",
        "billing",
        "billing",
        "billing",
    ]
    handoff = tool_steps(j)[0]
    record = HandoffRecord.of(handoff)
    assert record is not None and record.snapshot == billing
    assert port.recorded[0].seq == handoff.seq
    assert model_calls(j)[1].model == "billing-model"


def test_a_refused_handoff_fails_its_step_and_the_agent_goes_on():
    port = Port({}, refuse={"billing"})
    model = FakeModel([tool_call("transfer_to_billing", {}), text("alone")])
    j = journal()
    engine_for(model, port, snapshot("desk", "billing")).advance(j)
    [step] = tool_steps(j)
    assert (step.status, step.error_class, step.error) == (
        StepStatus.FAILED,
        ErrorClass.HANDOFF_REFUSED,
        "not billing",
    )
    assert j.finished[0] is StopReason.FINAL_ANSWER


def test_limits_only_tighten_after_a_handoff():
    start = Limits(max_steps=3, token_budget=1000, max_cost_usd=None)
    other = Limits(max_steps=12, token_budget=500, max_cost_usd=0.5)
    both = tightened(start, other)
    assert (both.max_steps, both.token_budget, both.max_cost_usd) == (3, 500, 0.5)
    assert tightened(start, None) == start


def test_the_loop_rule_refuses_a_way_the_run_already_went_and_one_per_turn():
    desk, billing = snapshot("desk", "billing"), snapshot("billing", "desk")

    def done(seq: int, source: str, target: AgentSnapshot) -> StepRecord:
        return StepRecord(
            seq=seq,
            kind=StepKind.TOOL_CALL,
            status=StepStatus.SUCCEEDED,
            tool=f"transfer_to_{target.name}",
            detail={"handoff": HandoffRecord(source, target.name, target).to_json()},
        )

    history = [done(2, "desk", billing), done(4, "billing", desk)]
    assert acting_agent(history, desk) == (4, desk)
    planner = Planner({**transfer_specs(desk)}, limits=Limits())
    turn = StepRecord(seq=5, kind=StepKind.MODEL_CALL, status=StepStatus.SUCCEEDED)
    plan = planner.plan_turn(
        turn,
        [
            ToolCall("c0", "transfer_to_billing", "{}", 0),
        ],
        steps=history,
        task_id="t",
    )
    [step] = plan.calls
    assert (step.status, step.error_class) == (
        StepStatus.SKIPPED,
        ErrorClass.HANDOFF_LOOP,
    )
    assert plan.stop is StopReason.HANDOFF_LOOP

    # Two transfers in one turn: the second is refused, the run goes on.
    fresh = planner.plan_turn(
        turn,
        [
            ToolCall("c0", "transfer_to_billing", "{}", 0),
            ToolCall("c1", "transfer_to_billing", "{}", 1),
        ],
        steps=[],
        task_id="t",
    )
    assert [s.status for s in fresh.calls] == [StepStatus.RUNNING, StepStatus.SKIPPED]
    assert fresh.calls[1].error_class == ErrorClass.HANDOFF_REFUSED
    assert fresh.stop is None


def test_max_handoffs_stops_the_run():
    port = Port({"billing": snapshot("billing", "desk")})
    model = FakeModel(
        [
            tool_call("transfer_to_billing", {}),
            tool_call("transfer_to_desk", {}),
        ]
    )
    j = journal()
    engine_for(model, port, snapshot("desk", "billing"), max_handoffs=1).advance(j)
    assert j.finished[0] is StopReason.HANDOFF_LOOP
    assert tool_steps(j)[-1].error_class == ErrorClass.HANDOFF_LOOP


def test_a_rerun_reproduces_the_handoff_from_its_record():
    billing = snapshot("billing", "desk")
    model = FakeModel(
        [
            tool_call("transfer_to_billing", {}),
            tool_call("calculate", {"expression": "1 + 2"}),
            text("3"),
        ]
    )
    j = journal(system="You are desk.")
    start = snapshot("desk", "billing")
    engine_for(model, Port({"billing": billing}), start).advance(j)

    result = rerun(
        RecordedRun(
            task_id="t1",
            goal=j.goal,
            system="You are desk.",
            model="desk-model",
            steps=list(j.steps),
            stop_reason="final_answer",
            agent=start,
        ),
        specs={},
        limits=Limits(),
    )
    assert result.matches, result.divergence
    assert [s.agent for s in result.steps] == [s.agent for s in j.steps]
