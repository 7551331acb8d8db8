"""The chaos checks themselves: each catches what it names, and a seed decides
the same session twice."""

from __future__ import annotations

import json
from pathlib import Path

from bench.chaos.invariants import StepRow, excess, message_ids, step_problems
from bench.chaos.plan import (
    Act,
    ChaosModel,
    FaultKind,
    action_decision,
    calls_for,
    fault_schedule,
    make_plans,
    parse_goal,
)
from bench.chaos.watch import check_frames


def test_a_client_that_resumed_after_its_last_rev_passes_the_frame_check():
    frames = [(1, 1), (2, 2), (2, 3), (3, 4), (2, 5)]  # step 2 changed twice

    assert check_frames(frames, {1: 1, 2: 5, 3: 4}) == (0, 0, 0)


def test_the_frame_check_counts_missed_doubled_and_out_of_order_frames():
    # Step 3's latest state (rev 6) never came; rev 2 came twice; rev 3 after 4.
    frames = [(1, 1), (2, 2), (2, 2), (3, 4), (2, 3)]

    assert check_frames(frames, {1: 1, 2: 3, 3: 6}) == (1, 1, 1)


def step(seq, rev, kind="tool_call", tool="calculate", parent=1, args=None, calls=0):
    response = {"tool_calls": [{}] * calls} if kind == "model_call" else None
    return StepRow(seq, rev, kind, tool, parent, args or {"n": seq}, None, response)


def test_steps_of_a_clean_run_have_no_problem():
    steps = [step(1, 2, "model_call", None, None, calls=2), step(2, 3), step(3, 4)]

    assert step_problems(steps) == ([], [], [])


def test_step_problems_name_gaps_unrecorded_calls_doubled_revs_and_repeated_calls():
    steps = [
        step(1, 2, "model_call", None, None, calls=3),
        step(2, 3, args={"x": 1}),
        step(4, 3, args={"x": 1}),
    ]

    lost, duplicated, twice = step_problems(steps)

    assert lost == ["seq 3 missing", "model call 1 proposed 3 calls, 2 recorded"]
    assert duplicated == ["rev 3 twice"]
    assert twice == ['calculate {"x": 1} recorded 2 times']


def test_excess_counts_each_value_beyond_its_first():
    assert excess(["a", "b", "a", "a", "c"]) == {"a": 2}


def test_message_ids_are_read_from_every_mail_file(tmp_path: Path):
    (tmp_path / "one.log").write_text("Message-ID: <a@x>\nSubject: s\n\nbody\n")
    (tmp_path / "two.log").write_text("Message-ID: <b@x>\n---\nMessage-ID: <a@x>\n")

    assert sorted(message_ids(tmp_path)) == ["<a@x>", "<a@x>", "<b@x>"]
    assert message_ids(tmp_path / "none") == []


def test_a_seed_decides_the_same_plans_decisions_and_fault_order():
    def decided(seed):
        plans = make_plans(seed, 50, watch_fraction=0.5, park_fraction=0.1)
        counts = {FaultKind.KILL: 5, FaultKind.WEB: 2}
        decisions = [
            action_decision(
                seed, n, 2, "send_email", {"body": "b"}, reject_fraction=0.2
            )
            for n in range(20)
        ]
        return plans, fault_schedule(seed, counts), decisions

    assert decided(3) == decided(3)
    assert decided(3) != decided(4)
    plans, schedule, decisions = decided(3)
    assert [kind for _, kind in schedule].count(FaultKind.KILL) == 5
    assert {d.decision for d in decisions} == {"approve", "reject"}
    assert all(parse_goal(p.goal) == (p.number, list(p.acts)) for p in plans)


def test_the_chaos_model_follows_the_plan_in_the_goal_turn_by_turn():
    model = ChaosModel(seed=1, latency=(0, 0))
    goal = "chaos run 9: calc,ticket"
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": goal}]

    first = model({"messages": messages})
    assert [c.name for c in first.tool_calls] == ["calculate"]
    assert json.loads(first.tool_calls[0].arguments) == calls_for(9, 0, Act.CALC)[0][1]

    messages += [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
        {"role": "tool", "tool_call_id": "c1", "content": "{}"},
    ]
    second = model({"messages": messages})
    assert [c.name for c in second.tool_calls] == ["create_ticket"]

    messages += [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c2"}]},
        {"role": "tool", "tool_call_id": "c2", "content": "{}"},
    ]
    assert model({"messages": messages}).content == "chaos run 9 done"
