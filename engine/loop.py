"""The agent loop: model -> parse -> validate -> decide -> execute -> observe.

The loop keeps no state of its own between calls: :meth:`Engine.advance` rebuilds
everything from the :class:`Journal` (the persisted steps) and writes every step
back through it before acting on it. The model's reply is persisted, with the
calls it proposes, before any of those calls runs; so a crash never asks the
model again for a call it already proposed, and a resumed run continues exactly
where the last committed step left it.

The port the loop drives a run through is :mod:`engine.journal` (its types are
importable from here too, as before they had a module of their own).
"""

from __future__ import annotations

import contextvars
import functools
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from .canonical import canonical_hash
from .context import (
    TokenEstimator,
    fitted_messages,
)
from .execution import Executor, select_fields
from .guards import Guards, GuardStage, RunGuard, Screen
from .handoff import (
    Handoffs,
    hand_off,
    open_port,
    take_over,
    transfer_target,
    with_transfers,
)
from .journal import Control, Journal, LeaseLost, Outcome, RunSnapshot  # noqa: F401
from .model_client import (
    ModelClient,
    ModelError,
    ModelReply,
    ReplyStream,
    ReplyWatcher,
    reply_stream,
)
from .model_steps import cut_step, failed_model_step, model_step, next_seq
from .planning import Planner
from .pricing import ModelPrice, format_usd, run_cost
from .questions import for_question
from .redaction import Redactor
from .routing import Route, Routing, recorded_route
from .spec import (
    FINAL_STEP_STATUSES,
    AgentSnapshot,
    CallContext,
    DetailKey,
    ErrorClass,
    Limits,
    Risk,
    StepDetail,
    StepKind,
    StepRecord,
    StepStatus,
    StopReason,
    Toolbox,
    ToolKind,
    ToolResult,
    ToolSpec,
    Usage,
    utcnow,
)
from .stops import STOP_MESSAGES
from .structured import (
    ANSWER_SCHEMA_KEY,
    EMPTY_ANSWER,
    AnswerFormat,
    Settled,
    settle_answer,
)

log = logging.getLogger(__name__)


@dataclass
class Engine:
    """One agent profile's loop over a toolbox, a model client and limits."""

    model_client: ModelClient
    toolbox: Toolbox
    executor: Executor
    limits: Limits = field(default_factory=Limits)
    redactor: Redactor = field(default_factory=Redactor)
    poll_interval_s: float = 0.5
    #: Runs model calls so a cancel can abandon them; None runs them inline.
    model_pool: ThreadPoolExecutor | None = None
    #: Called after each step is persisted (metrics, tests).
    on_step: Callable[[StepRecord], None] | None = None
    #: The run's price (engine.pricing); None: its model calls' cost is unknown.
    price: ModelPrice | None = None
    #: The agent's toolsets when the run must ask the model which it needs
    #: (rules picked none when it started); None: the toolbox is the turn's.
    routing: Routing | None = None
    #: How long a turn's only call, a read, may run before the turn is written.
    #: A read done within it is written with the model's reply, in one write
    #: and one push (the read is safe to run again: a crash before that write
    #: asks the model again, as for a reply not yet written); one that takes
    #: longer is written as running when the window ends, then its result. 0:
    #: the reply is always written first. Needs ``model_pool`` to wait on.
    read_window_s: float = 0.0
    #: The agent the run started with (its snapshot): its handoff targets are
    #: offered as transfer tools. None: a run that never hands off.
    agent: AgentSnapshot | None = None
    #: Makes the port the run hands off through (engine.handoff), when it
    #: first needs it; None: transfers are refused.
    handoffs: Callable[[], Handoffs] | None = None
    #: Hears each turn's reply as the model writes it (the worker pushes it to
    #: the run's watchers); None: nobody does.
    reply_watcher: ReplyWatcher | None = None
    #: The run's guardrails (engine.guards, from its agent snapshot); None: the
    #: run checks nothing and pays nothing for it.
    guards: Guards | None = None

    def __post_init__(self) -> None:
        # A structured answer (engine.structured): its schema, asked for. An
        # agent that declares none never enters that module.
        self._format = (
            AnswerFormat.of(self.agent, self.model_client)
            if self.agent is not None and ANSWER_SCHEMA_KEY in self.agent.extra
            else None
        )
        self._guard = self._run_guard()
        # The acting agent: the handoff step that made it act (0: the start).
        self._acting = self.agent or AgentSnapshot()
        self._acting_seq = 0
        self._port: Handoffs | None = None
        self._start_limits = self.limits
        self._withheld: tuple[str, ...] = ()  # a question's writes (engine.questions)
        # Steps record the acting agent only on runs whose agent may hand off.
        self._agent_name: str | None = None
        if self.agent is not None and self.agent.handoffs:
            self._agent_name = self.agent.name
            self.toolbox = with_transfers(self.toolbox, self.agent)

    # -- the loop ---------------------------------------------------------------

    def advance(self, journal: Journal) -> Outcome:
        """Drive the run until it finishes or parks. Safe to call again at any time."""
        snap = journal.snapshot()
        steps = list(snap.steps)
        routed = self.routing is None
        if self.routing is not None and (route := recorded_route(steps)) is not None:
            self._offer(route)
            routed = True
        # Only a run whose agent may hand off (or a fork of one that did) follows.
        follow = self.agent is not None and (
            bool(self.agent.handoffs) or _any_handoff(steps)
        )
        if follow:
            # Resumed after a handoff: the open turn is its proposer's.
            last_model = max(
                (s.seq for s in steps if s.kind is StepKind.MODEL_CALL), default=None
            )
            if self._follow(steps, snap, before_seq=last_model):
                routed = True
        self._ask_only(snap)
        if (self._guard.guards if self._guard is not None else None) is not self.guards:
            self._guard = self._run_guard()  # ``guards`` set after construction
        if self._guard is not None and self._guard.screen_input(
            journal, steps, snap, self.model_pool
        ):
            return Outcome.FINISHED
        while True:
            if journal.control().cancelled:
                journal.finish(StopReason.CANCELLED, answer=None, message=None)
                return Outcome.FINISHED

            if not routed:
                if self._route(journal, steps, snap) is Outcome.FINISHED:
                    return Outcome.FINISHED
                routed = True
                continue

            turn = self._open_turn(steps)
            runnable = [
                s for s in turn if s.status in (StepStatus.RUNNING, StepStatus.APPROVED)
            ]
            if runnable:
                self._execute(journal, steps, runnable, snap)
                continue
            if any(s.status is StepStatus.WAITING_APPROVAL for s in turn):
                if journal.park():
                    return Outcome.PARKED
                # Decided while this run was busy: reload and go on.
                steps = list(journal.snapshot().steps)
                continue

            if follow and self._follow(steps, snap):
                routed = True
                self._ask_only(snap)
            reason = self._stop_reason(journal, steps, snap)
            if reason is not None:
                journal.finish(
                    reason, answer=None, message=self._stop_message(reason, steps)
                )
                return Outcome.FINISHED

            messages = self._context(journal, steps, snap)
            estimate = TokenEstimator().raw(messages, self._tools())
            # What the calibrated estimator says of this request (the budget's view).
            in_context = TokenEstimator.calibrated(steps).estimate(
                messages, self._tools()
            )
            try:
                reply = self._call_model(journal, messages, snap.model)
            except _Interrupted as stop:
                if stop.partial is not None:
                    steps.extend(self._append(journal, [self._cut_step(stop, steps)]))
                self._finish_interrupted(journal, stop)
                return Outcome.FINISHED
            except ModelError as exc:
                if exc.partial is not None:  # A re-run of a reply that was cut.
                    cut = _Cancelled(exc.partial)
                    steps.extend(self._append(journal, [self._cut_step(cut, steps)]))
                    self._finish_interrupted(journal, cut)
                    return Outcome.FINISHED
                failed = self._failed_model_step(
                    exc,
                    steps,
                    snap.model,
                    {
                        DetailKey.PROMPT_ESTIMATE: estimate,
                        DetailKey.CONTEXT_ESTIMATE: in_context,
                    },
                )
                steps.extend(self._append(journal, [failed]))
                journal.finish(StopReason.MODEL_ERROR, answer=None, message=str(exc))
                return Outcome.FINISHED

            if self._guard is not None and self._guard.input_blocked(
                journal, steps, snap, reply, estimate
            ):
                return Outcome.FINISHED
            answer_screen = (
                self._guard.screen_answer(reply) if self._guard is not None else None
            )
            planned = self._plan(
                reply, steps, snap, estimate, journal.task_id, in_context=in_context
            )
            planned[0].detail[DetailKey.CONTEXT_ESTIMATE] = in_context
            pending = self._early_read(planned)
            if pending is not None and (done := _within(pending, self.read_window_s)):
                planned = [done if s.seq == done.seq else s for s in planned]
                pending = None
            persisted = self._append(journal, planned)
            steps.extend(persisted)
            if pending is not None:
                # The read outlasted the window: written as running, its result
                # follows as any read's does.
                self._record(journal, steps, pending.result())
            # The usage recorded (an estimate when the endpoint reported none):
            # the budgets count what the step says.
            snap.usage = snap.usage + Usage.from_dict(planned[0].usage)
            if not reply.tool_calls:
                outcome = self._answer(journal, steps, snap, reply, answer_screen)
                if outcome is not None:
                    return outcome

    # -- turns ------------------------------------------------------------------

    @staticmethod
    def _open_turn(steps: Sequence[StepRecord]) -> list[StepRecord]:
        """Tool steps of the latest model call that have not reached a final state."""
        last_model = next(
            (s for s in reversed(steps) if s.kind is StepKind.MODEL_CALL), None
        )
        if last_model is None:
            return []
        return [
            s
            for s in steps
            if s.kind is StepKind.TOOL_CALL
            and s.parent_seq == last_model.seq
            and s.status not in FINAL_STEP_STATUSES
        ]

    def _stop_reason(
        self, journal: Journal, steps: Sequence[StepRecord], snap: RunSnapshot
    ) -> StopReason | None:
        limits = self.limits
        model_calls = [s for s in steps if s.kind is StepKind.MODEL_CALL]
        guard = self._guard
        if guard is not None and guard.guards.blocks_results and model_calls:
            if guard.results_blocked(steps, model_calls[-1].seq, snap):
                return StopReason.GUARDRAIL
        if model_calls:
            flagged = StepDetail(model_calls[-1].detail).stop
            if flagged is not None:
                return flagged
            last = model_calls[-1]
            if limits.stop_on_approval_expired and any(
                s.status is StepStatus.EXPIRED
                for s in steps
                if s.kind is StepKind.TOOL_CALL and s.parent_seq == last.seq
            ):
                return StopReason.APPROVAL_EXPIRED
        tool_steps = [s for s in steps if s.kind is StepKind.TOOL_CALL]
        errors = sum(1 for s in tool_steps if s.status is StepStatus.FAILED)
        if errors >= limits.tool_error_limit:
            return StopReason.TOOL_ERROR_LIMIT
        if len(model_calls) >= limits.max_steps:
            return StopReason.MAX_STEPS
        if snap.usage.total_tokens >= limits.token_budget:
            return StopReason.TOKEN_BUDGET
        if (
            limits.max_cost_usd is not None
            and self.price is not None
            and run_cost(steps) >= limits.max_cost_usd
        ):
            # Without a price the cost is unknown: the budget cannot apply.
            return StopReason.COST_BUDGET
        if journal.active_seconds() >= limits.time_budget_s:
            return StopReason.TIME_BUDGET
        return None

    def _stop_message(
        self, reason: StopReason, steps: Sequence[StepRecord]
    ) -> str | None:
        if reason is StopReason.COST_BUDGET and self.limits.max_cost_usd is not None:
            spent = format_usd(run_cost(steps))
            budget = format_usd(self.limits.max_cost_usd)
            return f"Stopped: the run used up its cost budget ({spent} of {budget})."
        blocked = self._guard.message if self._guard is not None else None
        if reason is StopReason.GUARDRAIL and blocked is not None:
            return blocked
        return STOP_MESSAGES.get(reason)

    # -- handoffs -----------------------------------------------------------------

    def _follow(
        self,
        steps: Sequence[StepRecord],
        snap: RunSnapshot,
        *,
        before_seq: int | None = None,
    ) -> bool:
        """Let the agent the steps say acts (before ``before_seq``) take over:
        its instructions, model, price and tools, under the run's limits
        tightened by it. True when another agent took over."""
        assert self.agent is not None
        took = take_over(
            steps,
            self.agent,
            acting_seq=self._acting_seq,
            start_limits=self._start_limits,
            port=self._handoffs,
            before_seq=before_seq,
        )
        if took is None:
            return False
        # The target's own tools, whatever the first agent's toolsets chose.
        self.toolbox, self.routing = took.toolbox, None
        self.limits, self.price = took.limits, took.price
        snap.system = took.agent.system_prompt
        snap.model = took.agent.model or snap.model
        self._acting, self._acting_seq = took.agent, took.seq
        self._agent_name = took.agent.name or self._agent_name
        log.info("agent %s acts from step %s on", took.agent.name, took.seq)
        return True

    def _ask_only(self, snap: RunSnapshot) -> None:
        """A run whose message only asks goes without writes (engine.questions)."""
        if self.limits.questions_read_only and (
            q := for_question(snap.goal, self.toolbox)
        ):
            self.toolbox, self._withheld = q.toolbox, q.withheld

    def _handoffs(self) -> Handoffs:
        self._port = open_port(self._port, self.handoffs)
        return self._port

    # -- routing ------------------------------------------------------------------

    def _offer(self, route: Route) -> None:
        """From now on the run offers (and plans against) only ``route``'s tools."""
        assert self.routing is not None
        self.toolbox = self.routing.narrow(self.toolbox, route)

    def _route(
        self, journal: Journal, steps: list[StepRecord], snap: RunSnapshot
    ) -> Outcome | None:
        """Ask the model which toolsets the turn needs: one short call, recorded
        as a model_call step that carries the route. A failed call offers every
        tool; the run goes on either way."""
        assert self.routing is not None
        messages = self.routing.classification_messages(snap.goal)
        estimate = TokenEstimator().raw(messages)
        try:
            reply = self._call_model(
                journal, messages, snap.model, tools=[], live=False, structured=False
            )
        except _Interrupted as stop:
            self._finish_interrupted(journal, stop)
            return Outcome.FINISHED
        except ModelError as exc:
            route = self.routing.general()
            step = self._failed_model_step(
                exc, steps, snap.model, {DetailKey.PROMPT_ESTIMATE: round(estimate, 1)}
            )
        else:
            route = self.routing.from_reply(reply.content)
            step = self._model_step(
                reply, steps, estimate, in_context=int(estimate) + 1
            )
        step.detail[DetailKey.ROUTE] = route.to_json()
        steps.extend(self._append(journal, [step]))
        snap.usage = snap.usage + Usage.from_dict(step.usage)
        self._offer(route)
        return None

    # -- the model ----------------------------------------------------------------

    def _tools(self) -> list[dict[str, Any]]:
        return [self.toolbox.specs[n].openai_tool() for n in self.toolbox.names()]

    def _context(
        self, journal: Journal, steps: list[StepRecord], snap: RunSnapshot
    ) -> list[dict[str, Any]]:
        """Build messages; compact older tool results past 80% of the budget
        (:func:`~engine.context.fitted_messages`), persisting the compaction."""
        messages, compaction, history = fitted_messages(
            steps,
            snap,
            specs=self.toolbox.specs,
            tools=self._tools(),
            budget=self.limits.context_budget_tokens,
        )
        if compaction is not None:
            steps.extend(self._append(journal, [compaction]))
            snap.history = history
        return messages

    @staticmethod
    def _finish_interrupted(journal: Journal, stop: _Interrupted) -> None:
        journal.finish(stop.reason, answer=None, message=STOP_MESSAGES.get(stop.reason))

    def _failed_model_step(
        self,
        exc: ModelError,
        steps: Sequence[StepRecord],
        model: str,
        detail: dict[str, Any],
    ) -> StepRecord:
        """The model_call step of a request that failed after its retries
        (:func:`~engine.model_steps.failed_model_step`)."""
        return failed_model_step(
            exc,
            seq=next_seq(steps),
            model=model,
            detail=detail,
            priced=self.price is not None,
        )

    def _call_model(
        self,
        journal: Journal,
        messages: list[dict[str, Any]],
        model: str,
        *,
        tools: list[dict[str, Any]] | None = None,
        live: bool = True,
        structured: bool = True,
    ) -> ModelReply:
        """The model's reply; ``live`` streams it to :attr:`reply_watcher` as it
        is written (a routing call is not the run's answer)."""
        tools = self._tools() if tools is None else tools
        complete = (
            functools.partial(self._format.complete, self.model_client)
            if structured and self._format is not None
            else self.model_client.complete
        )
        stream = ReplyStream(self.reply_watcher if live else None)
        token = reply_stream.set(stream)
        try:
            if self.model_pool is None:
                return complete(messages=messages, tools=tools, model=model)
            # The run's context goes along (the task and intent of its log
            # lines, the reply's stream).
            future: Future[ModelReply] = self.model_pool.submit(
                contextvars.copy_context().run,
                complete,
                messages=messages,
                tools=tools,
                model=model,
            )
        finally:
            reply_stream.reset(token)
        while True:
            try:
                return future.result(timeout=self.poll_interval_s)
            except TimeoutError:
                if journal.control().cancelled:
                    # Close the in-flight call: its answer is never read, what
                    # it wrote so far is recorded as cut.
                    partial = stream.cut()
                    future.cancel()
                    raise _Cancelled(
                        partial if live and partial and partial.content else None
                    ) from None
                if journal.active_seconds() >= self.limits.time_budget_s:
                    stream.cut()
                    future.cancel()
                    raise _OutOfTime() from None

    def _cut_step(self, stop: _Interrupted, steps: Sequence[StepRecord]) -> StepRecord:
        """The model_call step of the reply ``stop`` cut short
        (:func:`~engine.model_steps.cut_step`)."""
        assert stop.partial is not None
        return cut_step(stop.partial, seq=next_seq(steps), redactor=self.redactor)

    # -- planning -----------------------------------------------------------------

    @property
    def planner(self) -> Planner:
        """The public planning of this engine's toolbox under its limits."""
        return Planner(
            specs=self.toolbox.specs, limits=self.limits, redactor=self.redactor
        )

    def _model_step(
        self,
        reply: ModelReply,
        steps: Sequence[StepRecord],
        estimate: float,
        *,
        in_context: int,
    ) -> StepRecord:
        """The model_call step of ``reply``, with its usage and cost
        (:func:`~engine.model_steps.model_step`)."""
        step = model_step(
            reply,
            seq=next_seq(steps),
            estimate=estimate,
            in_context=in_context,
            redactor=self.redactor,
            price=self.price,
        )
        if self._withheld:
            step.detail[DetailKey.WITHHELD] = list(self._withheld)
        return step

    def _plan(
        self,
        reply: ModelReply,
        steps: Sequence[StepRecord],
        snap: RunSnapshot,
        estimate: float,
        task_id: str,
        *,
        in_context: int | None = None,
    ) -> list[StepRecord]:
        """The model_call step and one step per proposed call, decided up front.

        Seqs are assigned here, at planning time: the calls of one turn get
        consecutive seqs after their model call, then any notes.
        """
        model_step = self._model_step(
            reply,
            steps,
            estimate,
            in_context=in_context if in_context is not None else int(estimate) + 1,
        )
        now = model_step.finished_at
        plan = self.planner.plan_turn(
            model_step,
            reply.tool_calls,
            steps=steps,
            task_id=task_id,
            inherited_taint=snap.inherited_taint,
            now=now,
        )
        plan.flag(model_step)
        return [model_step, *plan.steps]

    def _early_read(self, planned: list[StepRecord]) -> Future[StepRecord] | None:
        """Start the turn's call before the turn is written, when it is the
        turn's only call and a read that will run (no approval, no stop): the
        future of its finished step; None otherwise."""
        if self.model_pool is None or self.read_window_s <= 0:
            return None
        calls = [s for s in planned if s.kind is StepKind.TOOL_CALL]
        if len(calls) != 1 or calls[0].status is not StepStatus.RUNNING:
            return None
        if StepDetail(planned[0].detail).stop is not None:
            return None
        spec = self.toolbox.specs.get(calls[0].tool or "")
        if (
            spec is None
            or spec.risk is not Risk.READ_ONLY
            or spec.name not in self.toolbox.handlers
        ):
            return None
        # Written as running (if the window ends first) without a start time,
        # as a read is at planning; the finished step carries it.
        running = calls[0].copy(started_at=utcnow())
        return self.model_pool.submit(
            contextvars.copy_context().run, self._run_one, running
        )

    def _append(self, journal: Journal, steps: list[StepRecord]) -> list[StepRecord]:
        if self._agent_name is not None:
            for step in steps:
                step.agent = step.agent or self._agent_name
        persisted = journal.append(steps)
        if self.on_step is not None:
            for step in persisted:
                self.on_step(step)
        return persisted

    # -- guardrails and structured answers (engine.guards, engine.structured) ------

    def _run_guard(self) -> RunGuard | None:
        if self.guards is None:
            return None
        return RunGuard(self.guards, append=self._append, model_step=self._model_step)

    def _answer(
        self,
        journal: Journal,
        steps: list[StepRecord],
        snap: RunSnapshot,
        reply: ModelReply,
        screen: Screen | None,
    ) -> Outcome | None:
        """Finish with the final answer: its guardrails' trips recorded (a block
        stops the run instead), a structured answer checked against its schema
        (one repair turn: None, the loop goes on; then ``bad_answer``)."""
        if screen is not None and screen.trips:
            assert self._guard is not None
            if self._guard.answer_blocked(journal, steps, snap, screen):
                return Outcome.FINISHED
        answer = self.redactor.text(reply.content or "").strip()
        settled = (  # a plain answer has no schema to be checked against
            settle_answer(self._format.schema, answer, steps)
            if self._format is not None
            else Settled(StopReason.FINAL_ANSWER, answer=answer or EMPTY_ANSWER)
        )
        if settled.note is not None:
            steps.extend(self._append(journal, [settled.note]))
            return None
        journal.finish(
            settled.reason,
            answer=settled.answer,
            message=settled.message,
            answer_json=settled.value,
        )
        return Outcome.FINISHED

    # -- execution ----------------------------------------------------------------

    def _execute(
        self,
        journal: Journal,
        steps: list[StepRecord],
        runnable: list[StepRecord],
        snap: RunSnapshot,
    ) -> None:
        """Run the turn's executable calls in the model's order.

        Consecutive read-only calls run concurrently (bounded); a write waits for
        the reads before it and runs alone, so a read the model placed after a
        write sees its effect. Results are recorded per call, kept in call order
        by their seqs.
        """
        batches: list[tuple[bool, list[StepRecord]]] = []
        for step in sorted(runnable, key=lambda s: s.call_index or 0):
            spec = self.toolbox.specs.get(step.tool or "")
            if spec is None:
                self._record(
                    journal,
                    steps,
                    step.copy(
                        status=StepStatus.FAILED,
                        error=f"Tool '{step.tool}' is no longer available.",
                        error_class=ErrorClass.UNKNOWN_TOOL,
                        finished_at=utcnow(),
                    ),
                )
                continue
            if step.status is StepStatus.RUNNING and step.started_at is not None:
                # Started before a crash; its outcome is unknown.
                if not spec.retry_safe:
                    updated = journal.outcome_unknown(step, spec)
                    _replace(steps, updated)
                    continue
            if step.status is StepStatus.APPROVED:
                approved_hash = StepDetail(step.detail).approved_hash
                if approved_hash != canonical_hash(step.arguments):
                    self._record(
                        journal,
                        steps,
                        step.copy(
                            status=StepStatus.FAILED,
                            error="The arguments differ from the approved ones; "
                            "refused to run.",
                            error_class=ErrorClass.APPROVAL_MISMATCH,
                            finished_at=utcnow(),
                        ),
                    )
                    continue
            read = spec.risk is Risk.READ_ONLY and spec.kind != ToolKind.HANDOFF
            if read and batches and batches[-1][0]:
                batches[-1][1].append(step)
            else:
                batches.append((read, [step]))

        for number, (read, batch) in enumerate(batches):
            if number and journal.control().cancelled:
                return
            if not read and self._spec(batch[0]).kind == ToolKind.HANDOFF:
                target = transfer_target(self._spec(batch[0])) or ""
                # Safe to carry out again (nothing leaves the house): no start
                # is persisted first.
                done = hand_off(
                    batch[0],
                    target,
                    acting=self._acting,
                    port=self._handoffs,
                    redact=self.redactor.text,
                )
                self._record(journal, steps, done)
                if self._port is not None:
                    self._port.handed_off(done)
                continue
            if not read:
                running = self._start(journal, steps, batch[0])
                finished = self._run_one(running)
                spec = self.toolbox.specs[finished.tool or ""]
                if finished.error_class == ErrorClass.TIMEOUT and not spec.retry_safe:
                    # Abandoned mid-write: it may still happen. A human decides.
                    _replace(steps, journal.outcome_unknown(finished, spec))
                    continue
                self._record(journal, steps, finished)
                continue
            # A read is safe to run again, so its start is not persisted on its
            # own: its running state was recorded at planning, and its start
            # time is written with its result.
            started = [self._begin(steps, s) for s in batch]
            if len(started) > 1 and self.limits.parallel_tool_calls > 1:
                workers = min(self.limits.parallel_tool_calls, len(started))
                with ThreadPoolExecutor(workers, thread_name_prefix="call") as pool:
                    futures = {
                        pool.submit(contextvars.copy_context().run, self._run_one, s): s
                        for s in started
                    }
                    for future in as_completed(futures):
                        self._record(journal, steps, future.result())
            else:
                for step in started:
                    self._record(journal, steps, self._run_one(step))

    def _spec(self, step: StepRecord) -> ToolSpec:
        return self.toolbox.specs[step.tool or ""]

    @staticmethod
    def _begin(steps: list[StepRecord], step: StepRecord) -> StepRecord:
        running = step.copy(status=StepStatus.RUNNING, started_at=utcnow())
        _replace(steps, running)
        return running

    def _start(
        self, journal: Journal, steps: list[StepRecord], step: StepRecord
    ) -> StepRecord:
        """Persist a write's start first: after a crash its outcome is unknown."""
        running = journal.update(
            step.copy(status=StepStatus.RUNNING, started_at=utcnow())
        )
        _replace(steps, running)
        return running

    def _run_one(self, step: StepRecord) -> StepRecord:
        spec = self.toolbox.specs[step.tool or ""]
        handler = self.toolbox.handlers.get(spec.name)
        if handler is None:
            return step.copy(
                status=StepStatus.FAILED,
                error=f"No handler is registered for '{spec.name}'.",
                error_class=ErrorClass.NO_HANDLER,
                finished_at=utcnow(),
            )
        context = CallContext(
            task_id=(step.idempotency_key or "").split(":", 1)[0],
            seq=step.seq,
            idempotency_key=step.idempotency_key or "",
            tool=spec,
            deadline=time.monotonic() + spec.timeout_s,
        )
        result = self.executor.run(spec, handler, dict(step.arguments or {}), context)
        return self._finished(step, spec, result)

    def _finished(
        self, step: StepRecord, spec: ToolSpec, result: ToolResult
    ) -> StepRecord:
        detail = dict(step.detail)
        detail[DetailKey.ATTEMPT_COUNT] = len(result.attempts)
        if result.ok:
            value = self.redactor.data(select_fields(result.value, spec.result_fields))
            guard = self._guard
            if guard is not None and guard.guards.at(GuardStage.TOOL_RESULT):
                value = guard.screen_result(step, value, detail)
            if spec.untrusted_output or result.untrusted:
                detail[DetailKey.UNTRUSTED] = True
            if result.untrusted:
                detail[DetailKey.UNTRUSTED_RESULT] = True
            return step.copy(
                status=StepStatus.CACHED if result.cached else StepStatus.SUCCEEDED,
                result=value,
                error=None,
                error_class=None,
                attempts=[a.as_dict() for a in result.attempts],
                finished_at=result.finished_at or utcnow(),
                detail=detail,
            )
        # A rate-limited call did not run: an observation, not a tool error, so it
        # counts neither toward tool_error_limit nor toward the circuit breaker.
        limited = result.error_class == ErrorClass.RATE_LIMITED
        return step.copy(
            status=StepStatus.SKIPPED if limited else StepStatus.FAILED,
            error=self.redactor.text(result.error or "The tool failed."),
            error_class=result.error_class,
            attempts=[a.as_dict() for a in result.attempts],
            finished_at=result.finished_at or utcnow(),
            detail=detail,
        )

    def _record(
        self, journal: Journal, steps: list[StepRecord], step: StepRecord
    ) -> None:
        updated = journal.update(step)
        _replace(steps, updated)
        if self.on_step is not None:
            self.on_step(updated)


class _Interrupted(Exception):
    """The run must stop while the model is thinking, for ``reason``; ``partial``
    is the reply it had written when it was cut (None: none to record)."""

    reason: StopReason

    def __init__(self, partial: ModelReply | None = None) -> None:
        super().__init__()
        self.partial = partial


class _Cancelled(_Interrupted):
    reason = StopReason.CANCELLED


class _OutOfTime(_Interrupted):
    """The time budget ran out while the model was thinking."""

    reason = StopReason.TIME_BUDGET


def _any_handoff(steps: Sequence[StepRecord]) -> bool:
    """Whether any of ``steps`` is a handoff (a fork's copies can be)."""
    # A plain loop, not any(): no generator call per step on every run's path.
    for step in steps:  # noqa: SIM110
        if DetailKey.HANDOFF in step.detail:
            return True
    return False


def _replace(steps: list[StepRecord], updated: StepRecord) -> None:
    for index, step in enumerate(steps):
        if step.seq == updated.seq:
            steps[index] = updated
            return
    steps.append(updated)


def _within(future: Future[StepRecord], seconds: float) -> StepRecord | None:
    """The future's step if it is done within ``seconds``, else None."""
    try:
        return future.result(timeout=seconds)
    except TimeoutError:
        return None
