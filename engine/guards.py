"""Guardrails: checks on what enters and leaves a run, in plain Python.

A guardrail (:class:`GuardSpec`, configured per agent in the ``guardrails``
app and recorded in the run's agent snapshot when it starts) checks one stage of
a run: the user's input before the model reads it, a tool's result before the
model reads it, or the final answer before the user reads it. Its kind says what
it looks for:

- ``personal_data``: e-mail addresses, phone numbers, card numbers (Luhn),
  IBANs (mod 97) and Chinese resident ID numbers (their check digit);
- ``secrets``: the values and credential patterns the run's redactor knows;
- ``blocklist``: words (whole, case-insensitive) and regular expressions;
- ``max_length``: more characters than allowed;
- ``classifier``: a model asked with a rubric (the caller's :data:`Classifier`).

Its action says what a trip does: ``block`` stops the run (stop reason
``guardrail``, the user told which check in their language), ``redact`` masks
what was found (``[REDACTED:card_number]``) so the model or the user never sees
it, ``flag`` records the trip and changes nothing. Every trip is recorded
(:meth:`Guards.step`) and handed to ``on_trip`` (the audit log).

Every check but the classifier is a regular expression pass over the text:
instant, deterministic, so the loop runs it before the model call and again on a
resumed run to rebuild what the model was shown. The classifier is a model call:
on the input it runs beside the run's own model call (:meth:`Guards.classify_later`).

:class:`RunGuard` is one run's guardrails as the loop (:class:`engine.loop.Engine`)
applies them: where each stage is screened, and the steps and stop a trip makes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from .model_steps import next_seq
from .redaction import Redactor
from .spec import DetailKey, StepKind, StepRecord, StepStatus, StopReason, utcnow

if TYPE_CHECKING:
    from .journal import Journal, RunSnapshot
    from .model_client import ModelReply

#: Where ``Task.agent_snapshot`` keeps the run's guardrails.
GUARDRAILS_KEY = "guardrails"


class GuardKind(StrEnum):
    PERSONAL_DATA = "personal_data"
    SECRETS = "secrets"
    BLOCKLIST = "blocklist"
    MAX_LENGTH = "max_length"
    CLASSIFIER = "classifier"


class GuardStage(StrEnum):
    INPUT = "input"
    ANSWER = "answer"
    TOOL_RESULT = "tool_result"


class GuardAction(StrEnum):
    BLOCK = "block"
    REDACT = "redact"
    FLAG = "flag"


class PersonalData(StrEnum):
    """What ``personal_data`` finds, in the order it looks (an earlier find wins
    the characters it covers: a card number is not also a phone number)."""

    CARD_NUMBER = "card_number"
    IBAN = "iban"
    CN_ID = "cn_id"
    EMAIL = "email"
    PHONE = "phone"


_EDGE_L = r"(?<![0-9A-Za-z])"
_EDGE_R = r"(?![0-9A-Za-z])"
_PHONE_L = rf"{_EDGE_L}(?<!\d[ -])"
_PHONE_R = rf"{_EDGE_R}(?![ -]\d)"
_PERSONAL: dict[PersonalData, re.Pattern[str]] = {
    PersonalData.CARD_NUMBER: re.compile(rf"{_EDGE_L}\d(?:[ -]?\d){{12,18}}{_EDGE_R}"),
    PersonalData.IBAN: re.compile(
        rf"{_EDGE_L}[A-Z]{{2}}\d{{2}}(?: ?[A-Z0-9]){{11,30}}{_EDGE_R}"
    ),
    PersonalData.CN_ID: re.compile(rf"{_EDGE_L}\d{{17}}[\dXx]{_EDGE_R}"),
    PersonalData.EMAIL: re.compile(
        r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
    ),
    # Not a run of digits inside a longer one (a failed card number is no phone).
    PersonalData.PHONE: re.compile(
        rf"{_PHONE_L}(?:\+\d{{1,3}}[ -]?)?(?:\(\d{{2,4}}\)[ -]?|\d{{2,4}}[ -])?"
        rf"\d{{3,4}}[ -]?\d{{4}}{_PHONE_R}"
        rf"|{_PHONE_L}1[3-9]\d{{9}}{_PHONE_R}"
    ),
}
_CN_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_CN_ID_CHECK = "10X98765432"


def luhn_ok(digits: str) -> bool:
    """Whether ``digits`` pass the Luhn check of card numbers."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def iban_ok(iban: str) -> bool:
    """Whether ``iban`` (no spaces) passes ISO 13616's mod-97 check."""
    if not 15 <= len(iban) <= 34:
        return False
    moved = iban[4:] + iban[:4]
    number = "".join(str(int(c, 36)) for c in moved.upper())
    return int(number) % 97 == 1


def cn_id_ok(number: str) -> bool:
    """Whether an 18-character resident ID number has the right check digit
    (GB 11643: weighted sum mod 11)."""
    total = sum(int(d) * w for d, w in zip(number[:17], _CN_ID_WEIGHTS, strict=True))
    return _CN_ID_CHECK[total % 11] == number[17].upper()


def _valid(kind: PersonalData, found: str) -> bool:
    compact = re.sub(r"[ -]", "", found)
    if kind is PersonalData.CARD_NUMBER:
        return 13 <= len(compact) <= 19 and luhn_ok(compact)
    if kind is PersonalData.IBAN:
        return iban_ok(compact)
    if kind is PersonalData.CN_ID:
        return cn_id_ok(compact)
    if kind is PersonalData.PHONE:
        return len(re.sub(r"\D", "", found)) >= 7
    return True


@dataclass(frozen=True)
class Found:
    """What one check found in one text: the labels (``card_number``,
    ``secret``…) and the text with each find masked."""

    labels: tuple[str, ...]
    masked: str


def find_personal_data(text: str, kinds: Sequence[str] = ()) -> Found:
    """Personal data in ``text`` (``kinds``: which of :class:`PersonalData`;
    empty: all), each find masked as ``[REDACTED:<kind>]``."""
    wanted = [k for k in PersonalData if not kinds or k.value in kinds]
    taken: list[tuple[int, int, PersonalData]] = []
    for kind in wanted:
        for match in _PERSONAL[kind].finditer(text):
            start, end = match.span()
            if any(start < e and s < end for s, e, _ in taken):
                continue
            if _valid(kind, match.group(0)):
                taken.append((start, end, kind))
    if not taken:
        return Found((), text)
    taken.sort()
    parts: list[str] = []
    at = 0
    for start, end, kind in taken:
        parts.append(text[at:start])
        parts.append(f"[REDACTED:{kind.value}]")
        at = end
    parts.append(text[at:])
    labels = tuple(dict.fromkeys(kind.value for _, _, kind in taken))
    return Found(labels, "".join(parts))


_REDACTED = re.compile(r"\[REDACTED:([A-Za-z0-9_.-]+)\]")


def find_secrets(text: str, redactor: Redactor) -> Found:
    """The secret values and credential patterns ``redactor`` knows, in ``text``
    (the labels say ``secret``: never which one, nor its name)."""
    masked = redactor.text(text)
    if masked == text:
        return Found((), text)
    before = len(_REDACTED.findall(text))
    after = len(_REDACTED.findall(masked))
    return Found(("secret",), masked) if after > before else Found((), text)


def find_blocked(text: str, config: Mapping[str, Any]) -> Found:
    """``config["words"]`` (whole words, any case) and ``config["patterns"]``
    (regular expressions) in ``text``."""
    patterns = blocklist_patterns(config)
    labels: list[str] = []
    masked = text
    for label, pattern in patterns:
        masked, count = pattern.subn("[REDACTED:blocklist]", masked)
        if count:
            labels.append(label)
    return Found(tuple(dict.fromkeys(labels)), masked) if labels else Found((), text)


def blocklist_patterns(config: Mapping[str, Any]) -> list[tuple[str, re.Pattern[str]]]:
    """The compiled words and patterns of a blocklist (raises re.error for a bad
    pattern: the admin's form says so before it is saved)."""
    out: list[tuple[str, re.Pattern[str]]] = []
    for word in config.get("words") or ():
        word = str(word).strip()
        if word:
            # Whole words where words have edges: Chinese has no spaces to
            # mark them, so a Han word matches wherever it stands.
            left = r"(?<![0-9A-Za-z_])" if word[0].isascii() else ""
            right = r"(?![0-9A-Za-z_])" if word[-1].isascii() else ""
            pattern = re.compile(left + re.escape(word) + right, re.IGNORECASE)
            out.append((f"word:{word}", pattern))
    for pattern in config.get("patterns") or ():
        if str(pattern):
            out.append((f"pattern:{pattern}", re.compile(str(pattern))))
    return out


def find_too_long(text: str, config: Mapping[str, Any]) -> Found:
    """More than ``config["max_chars"]`` characters: masked by cutting there."""
    limit = int(config.get("max_chars") or 0)
    if limit <= 0 or len(text) <= limit:
        return Found((), text)
    return Found(("max_length",), text[:limit] + "…")


@dataclass(frozen=True)
class ClassifierVerdict:
    """What a classifier said of one text: whether it trips, and why. A
    classifier that failed (``error``) does not trip: the trip would be a guess."""

    tripped: bool
    reason: str = ""
    error: str = ""


#: ``classify(text, config)`` -> the verdict of the rubric in ``config``.
Classifier = Callable[[str, Mapping[str, Any]], ClassifierVerdict]


@dataclass(frozen=True)
class GuardSpec:
    """One guardrail as a run records it (``agent_snapshot["guardrails"]``)."""

    name: str
    kind: GuardKind
    stage: GuardStage
    action: GuardAction
    config: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GuardSpec | None:
        """The guardrail ``data`` records; None for one this version cannot run."""
        try:
            return cls(
                name=str(data["name"]),
                kind=GuardKind(data["kind"]),
                stage=GuardStage(data["stage"]),
                action=GuardAction(data["action"]),
                config=dict(data.get("config") or {}),
            )
        except (KeyError, ValueError, TypeError):
            return None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind.value,
            "stage": self.stage.value,
            "action": self.action.value,
            "config": dict(self.config),
        }


@dataclass(frozen=True)
class Trip:
    """One guardrail that tripped on one text."""

    guard: GuardSpec
    labels: tuple[str, ...]
    reason: str = ""
    #: The tool call whose result it checked (tool_result stage).
    seq: int | None = None

    @property
    def action(self) -> GuardAction:
        # A classifier cannot say which characters to mask: it flags instead.
        if self.guard.action is GuardAction.REDACT and self.guard.kind is (
            GuardKind.CLASSIFIER
        ):
            return GuardAction.FLAG
        return self.guard.action

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.guard.name,
            "kind": self.guard.kind.value,
            "stage": self.guard.stage.value,
            "action": self.action.value,
            "labels": list(self.labels),
        }
        if self.reason:
            data["reason"] = self.reason
        if self.seq is not None:
            data["seq"] = self.seq
        return data


@dataclass
class Screen:
    """One stage's checks of one text: what is left of it, and the trips."""

    text: str
    trips: list[Trip] = field(default_factory=list)

    @property
    def blocked(self) -> Trip | None:
        return next((t for t in self.trips if t.action is GuardAction.BLOCK), None)


@dataclass
class Guards:
    """The run's guardrails and what they need: the redactor (secrets), the
    classifier (a model call) and who hears of each trip (the audit log)."""

    specs: tuple[GuardSpec, ...]
    redactor: Redactor = field(default_factory=Redactor)
    classify: Classifier | None = None
    #: Called with each trip and the task's id, once the trip is decided.
    on_trip: Callable[[Trip, str], None] | None = None

    @classmethod
    def from_snapshot(cls, extra: Mapping[str, Any], **kwargs: Any) -> Guards | None:
        """The guardrails a snapshot's ``extra`` records; None when it has none."""
        raw = extra.get(GUARDRAILS_KEY)
        if not raw:
            return None
        specs = tuple(
            spec
            for item in raw
            if isinstance(item, Mapping) and (spec := GuardSpec.from_json(item))
        )
        return cls(specs=specs, **kwargs) if specs else None

    def __post_init__(self) -> None:
        # Looked up on the step path: by stage once, not filtered per call.
        self._by_stage = {
            stage: tuple(s for s in self.specs if s.stage is stage)
            for stage in GuardStage
        }
        #: Whether a tool's result can stop the run (the loop looks only then).
        self.blocks_results = any(
            s.action is GuardAction.BLOCK
            for s in self._by_stage[GuardStage.TOOL_RESULT]
        )

    def at(self, stage: GuardStage) -> tuple[GuardSpec, ...]:
        return self._by_stage[stage]

    def classifiers(self, stage: GuardStage) -> tuple[GuardSpec, ...]:
        return tuple(s for s in self.at(stage) if s.kind is GuardKind.CLASSIFIER)

    # -- checking ------------------------------------------------------------------

    def screen(
        self,
        stage: GuardStage,
        text: str,
        *,
        verdicts: Mapping[str, ClassifierVerdict] | None = None,
        pure_only: bool = False,
    ) -> Screen:
        """Run ``stage``'s guardrails over ``text`` in their order: each redact
        masks what the next one reads. Classifiers answer from ``verdicts`` when
        given (asked beside the model call); ``pure_only`` leaves them out."""
        screen = Screen(text)
        for spec in self.at(stage):
            if spec.kind is GuardKind.CLASSIFIER:
                if pure_only:
                    continue
                verdict = (verdicts or {}).get(spec.name) or self._classify(
                    spec, screen.text
                )
                if verdict.tripped:
                    screen.trips.append(Trip(spec, ("classifier",), verdict.reason))
                continue
            found = self._find(spec, screen.text)
            if not found.labels:
                continue
            trip = Trip(spec, found.labels)
            screen.trips.append(trip)
            if trip.action is GuardAction.REDACT:
                screen.text = found.masked
        return screen

    def screen_data(
        self, stage: GuardStage, value: Any, *, seq: int
    ) -> tuple[Any, list[Trip]]:
        """``stage``'s guardrails over JSON-like ``value`` (a tool's result): the
        pure checks over each string inside it, masking in place; max_length and
        classifiers over its JSON text."""
        trips: dict[str, Trip] = {}

        def walk(item: Any) -> Any:
            if isinstance(item, str):
                screen = self.screen(stage, item, pure_only=True)
                for trip in screen.trips:
                    if trip.guard.kind is GuardKind.MAX_LENGTH:
                        continue
                    seen = trips.get(trip.guard.name)
                    labels = (*seen.labels, *trip.labels) if seen else trip.labels
                    trips[trip.guard.name] = Trip(
                        trip.guard, tuple(dict.fromkeys(labels)), seq=seq
                    )
                return screen.text
            if isinstance(item, Mapping):
                return {k: walk(v) for k, v in item.items()}
            if isinstance(item, list | tuple):
                return [walk(v) for v in item]
            return item

        cleaned = walk(value)
        whole = cleaned if isinstance(cleaned, str) else _json(cleaned)
        for spec in self.at(stage):
            if spec.kind is GuardKind.MAX_LENGTH:
                found = find_too_long(whole, spec.config)
                if found.labels:
                    trips[spec.name] = Trip(spec, found.labels, seq=seq)
                    if spec.action is GuardAction.REDACT:
                        cleaned = found.masked
            elif spec.kind is GuardKind.CLASSIFIER:
                verdict = self._classify(spec, whole)
                if verdict.tripped:
                    trips[spec.name] = Trip(
                        spec, ("classifier",), verdict.reason, seq=seq
                    )
        return cleaned, list(trips.values())

    def classify_later(
        self, stage: GuardStage, text: str, pool: Executor
    ) -> Future[dict[str, ClassifierVerdict]] | None:
        """Ask ``stage``'s classifiers about ``text`` on ``pool`` (beside the
        run's model call); None when the stage has none."""
        specs = self.classifiers(stage)
        if not specs:
            return None
        return pool.submit(
            lambda: {spec.name: self._classify(spec, text) for spec in specs}
        )

    def _find(self, spec: GuardSpec, text: str) -> Found:
        if spec.kind is GuardKind.PERSONAL_DATA:
            return find_personal_data(text, tuple(spec.config.get("types") or ()))
        if spec.kind is GuardKind.SECRETS:
            return find_secrets(text, self.redactor)
        if spec.kind is GuardKind.BLOCKLIST:
            return find_blocked(text, spec.config)
        if spec.kind is GuardKind.MAX_LENGTH:
            return find_too_long(text, spec.config)
        return Found((), text)

    def _classify(self, spec: GuardSpec, text: str) -> ClassifierVerdict:
        if self.classify is None:
            return ClassifierVerdict(False, error="No classifier is configured.")
        try:
            return self.classify(text, spec.config)
        except Exception as exc:  # noqa: BLE001 - a failed check never fails the run
            return ClassifierVerdict(False, error=f"{type(exc).__name__}: {exc}")

    # -- recording -----------------------------------------------------------------

    def step(self, trip: Trip, seq: int) -> StepRecord:
        """The guardrail step that records ``trip`` (input and answer stages)."""
        now = utcnow()
        return StepRecord(
            seq=seq,
            kind=StepKind.GUARDRAIL,
            status=StepStatus.FAILED
            if trip.action is GuardAction.BLOCK
            else StepStatus.SUCCEEDED,
            tool=trip.guard.name,
            started_at=now,
            finished_at=now,
            detail={DetailKey.GUARDRAIL: trip.to_json()},
        )

    def tell(self, trips: Sequence[Trip], task_id: str) -> None:
        if self.on_trip is not None:
            for trip in trips:
                self.on_trip(trip, task_id)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


_HAN = re.compile(r"[\u4e00-\u9fff]")

_WHAT = {
    GuardStage.INPUT: ("your message", "您的消息"),
    GuardStage.ANSWER: ("the answer", "回答"),
    GuardStage.TOOL_RESULT: ("a tool's result", "工具返回的结果"),
}


def block_message(trip: Trip, language_of: str) -> str:
    """What the user is told of a block, in the language of ``language_of``
    (their message): Chinese when it is written in Han characters."""
    english, chinese = _WHAT[trip.guard.stage]
    found = ", ".join(trip.labels)
    if _HAN.search(language_of or ""):
        return (
            f"已停止：安全规则「{trip.guard.name}」（{trip.guard.kind.value}）"
            f"拦截了{chinese}（{found}）。"
        )
    return (
        f"Stopped: the guardrail '{trip.guard.name}' ({trip.guard.kind.value}) "
        f"blocked {english} ({found})."
    )


def trips_of(step: Any) -> list[dict[str, Any]]:
    """The trips one step records (a guardrail step's, or a tool call's)."""
    return trips_in(getattr(step, "detail", None) or {})


def trips_in(detail: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The trips a step's ``detail`` records."""
    value = detail.get(DetailKey.GUARDRAIL)
    if isinstance(value, Mapping):
        return [dict(value)]
    if isinstance(value, list):
        return [dict(v) for v in value if isinstance(v, Mapping)]
    return []


def tool_block(steps: Sequence[StepRecord], after_seq: int) -> Trip | None:
    """A block that tripped on the result of a call proposed by the model call
    ``after_seq``, or later: the run stops at the turn's end."""
    for step in steps:
        if step.kind is not StepKind.TOOL_CALL or (step.parent_seq or 0) < after_seq:
            continue
        for data in trips_of(step):
            if data.get("action") == GuardAction.BLOCK:
                spec = GuardSpec.from_json(
                    {**data, "stage": GuardStage.TOOL_RESULT, "action": "block"}
                )
                if spec is not None:
                    return Trip(spec, tuple(data.get("labels") or ()), seq=step.seq)
    return None


#: Persists new steps through the engine (which also tells ``on_step``).
Append = Callable[["Journal", list[StepRecord]], list[StepRecord]]
#: The engine's model_call step of a reply (seq, usage and cost).
ModelStep = Callable[..., StepRecord]


class RunGuard:
    """One run's guardrails at the loop's seams: the input screened before the
    model reads it (its classifier beside the first model call), a tool's result
    before the model reads it, the final answer before anything records it.
    Built by the engine per run; what it needs of the engine comes in here."""

    def __init__(
        self, guards: Guards, *, append: Append, model_step: ModelStep
    ) -> None:
        self.guards = guards
        self._append = append
        self._model_step = model_step
        self._input_verdicts: Future[dict[str, ClassifierVerdict]] | None = None
        #: What the user is told of the block that stopped the run at a turn's
        #: end (a tool's result); None: none did.
        self.message: str | None = None

    def screen_input(
        self,
        journal: Journal,
        steps: list[StepRecord],
        snap: RunSnapshot,
        pool: Executor | None,
    ) -> bool:
        """Check the user's input before the model reads it: the pure checks now
        (deterministic, so a resumed run masks the same again and records its
        trips once), a classifier beside the run's first model call when there
        is a ``pool`` (the engine's model pool) to run it on (else now). True
        when a block stopped the run."""
        guards = self.guards
        if not guards.at(GuardStage.INPUT):
            return False
        first = not any(s.kind is StepKind.MODEL_CALL for s in steps)
        later = first and pool is not None
        screen = guards.screen(
            GuardStage.INPUT, snap.goal, pure_only=later or not first
        )
        snap.history = [
            {
                **turn,
                "content": guards.screen(
                    GuardStage.INPUT, turn["content"], pure_only=True
                ).text,
            }
            if turn.get("role") == "user"
            else turn
            for turn in snap.history
        ]
        recorded = any(
            s.kind is StepKind.GUARDRAIL
            and s.detail.get(DetailKey.GUARDRAIL, {}).get("stage") == GuardStage.INPUT
            for s in steps
        )
        if screen.trips and not recorded:
            self.record_trips(journal, steps, screen.trips)
        snap.goal = screen.text
        if screen.blocked is not None:
            self.finish_blocked(journal, screen.blocked, snap)
            return True
        if later and pool is not None:
            self._input_verdicts = guards.classify_later(
                GuardStage.INPUT, snap.goal, pool
            )
        return False

    def input_blocked(
        self,
        journal: Journal,
        steps: list[StepRecord],
        snap: RunSnapshot,
        reply: ModelReply,
        estimate: float,
    ) -> bool:
        """The input's classifiers, asked beside the model call, answer: their
        trips are recorded; a block keeps the reply (paid for, in the trace) but
        runs none of its calls, and stops the run. False at once when none was
        asked (or it answered already)."""
        if self._input_verdicts is None:
            return False
        verdicts = self._input_verdicts.result()
        self._input_verdicts = None
        trips = [
            Trip(spec, ("classifier",), verdict.reason)
            for spec in self.guards.classifiers(GuardStage.INPUT)
            if (verdict := verdicts.get(spec.name)) is not None and verdict.tripped
        ]
        blocked = Screen(snap.goal, trips).blocked
        if blocked is not None:
            model_step = self._model_step(
                reply, steps, estimate, in_context=int(estimate) + 1
            )
            model_step.detail[DetailKey.STOP] = StopReason.GUARDRAIL.value
            steps.extend(self._append(journal, [model_step]))
        if trips:
            self.record_trips(journal, steps, trips)
        if blocked is not None:
            self.finish_blocked(journal, blocked, snap)
            return True
        return False

    def screen_answer(self, reply: ModelReply) -> Screen | None:
        """Check a final answer before anything records it: a redact masks the
        reply itself, so neither the trace nor the user sees what it found."""
        if reply.tool_calls or not self.guards.at(GuardStage.ANSWER):
            return None
        screen = self.guards.screen(GuardStage.ANSWER, reply.content or "")
        if screen.text != (reply.content or ""):
            reply.content = screen.text
            reply.message = {**reply.message, "content": screen.text}
        return screen

    def answer_blocked(
        self,
        journal: Journal,
        steps: list[StepRecord],
        snap: RunSnapshot,
        screen: Screen,
    ) -> bool:
        """The final answer's trips recorded; True when a block stopped the run
        instead of the answer finishing it."""
        self.record_trips(journal, steps, screen.trips)
        if screen.blocked is not None:
            self.finish_blocked(journal, screen.blocked, snap)
            return True
        return False

    def results_blocked(
        self, steps: Sequence[StepRecord], after_seq: int, snap: RunSnapshot
    ) -> bool:
        """Whether a block tripped on a result of the turn of model call
        ``after_seq`` (or later): the run stops, :attr:`message` says why."""
        trip = tool_block(steps, after_seq)
        if trip is None:
            return False
        self.message = block_message(trip, snap.goal)
        return True

    def screen_result(
        self, step: StepRecord, value: Any, detail: dict[str, Any]
    ) -> Any:
        """A tool's result through the tool_result guardrails, before the model
        reads it: masked where one redacts, withheld where one blocks (the run
        stops at the turn's end); the trips annotate the call's step."""
        value, trips = self.guards.screen_data(
            GuardStage.TOOL_RESULT, value, seq=step.seq
        )
        if not trips:
            return value
        detail[DetailKey.GUARDRAIL] = [trip.to_json() for trip in trips]
        self.guards.tell(trips, (step.idempotency_key or "").split(":", 1)[0])
        if any(trip.action is GuardAction.BLOCK for trip in trips):
            return {"withheld": "A guardrail blocked this result."}
        return value

    def record_trips(
        self, journal: Journal, steps: list[StepRecord], trips: Sequence[Trip]
    ) -> None:
        records: list[StepRecord] = []
        for trip in trips:
            records.append(self.guards.step(trip, next_seq([*steps, *records])))
        steps.extend(self._append(journal, records))
        self.guards.tell(trips, journal.task_id)

    def finish_blocked(self, journal: Journal, trip: Trip, snap: RunSnapshot) -> None:
        journal.finish(
            StopReason.GUARDRAIL, answer=None, message=block_message(trip, snap.goal)
        )
