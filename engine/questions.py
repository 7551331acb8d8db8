"""A question gets no write: the tools a run withholds when its message only asks.

A small model shown a write tool while answering a plain question sometimes
proposes it ("what is the budget?" became a ticket, parked for approval, and the
user got no answer). When an agent's limits say so (``Limits.questions_read_only``:
the agent's switch, on where the product runs as an assistant), a run whose
message asks a question and asks for no action is offered only its read-only
tools (and its handoffs); its model calls record which tools were withheld
(``DetailKey.WITHHELD``), so the trace says so. Anything that reads as a request
to act ("open a ticket", "发邮件给…") keeps every tool: the rule only ever takes
writes away from a question, and an approval still guards whatever a run may
propose. Pure text rules; no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .spec import Risk, Toolbox, ToolKind

# A question: a question mark anywhere, or an interrogative at its start
# (English), or an interrogative word or particle (Chinese). A request to look
# something up or work something out ("Compute the caching plan's budget",
# "帮我算一下…") asks for no action either: worded as a command, it was offered
# the writes, and a small model proposed a ticket and an e-mail for it.
_QUESTION_MARK = re.compile(r"[?？]")
_QUESTION_EN = re.compile(
    r"^\s*(?:please\s+)?(?:what|which|who|whom|whose|where|when|why|how|is|are|was|"
    r"were|do|does|did|can|could|would|will|has|have|tell me|find|look up|show me|"
    r"compute|calculate|work out|add up|sum up|total|count|list|name|identify|"
    r"summari[sz]e|explain|describe|give me|search|look for|check|"
    # "Add the budget of … to …": adding figures, not adding someone to a group.
    r"add(?=[^.!?]*\b(?:budgets?|costs?|totals?|figures?|numbers?|amounts?|prices?)\b))\b",
    re.IGNORECASE,
)
_QUESTION_ZH = re.compile(
    r"吗|呢|哪|什么|多少|几[个天条项]|是否|有没有|怎么|如何|为什么|谁|"
    r"算一?下|计算|算出|相加|加起来|求和|合计|总和|列出|找出|查一?下|查找|搜索|告诉我"
)

# A request to act: a verb (or object) of the writes such an agent can make.
_ACTION_WORDS = (
    r"create|open|file|raise|send|e-?mail|mail|post|submit|book|schedule|"
    r"delete|remove|update|change|notify|forward|reply|cancel|refund|deploy|"
    r"remember|forget|save|store|ticket|issue|message|write|draft|escalate|"
    r"assign|close|approve|reject|pay|transfer|order|invite|publish"
)
_ACTION_EN = re.compile(rf"\b(?:{_ACTION_WORDS})\b", re.IGNORECASE)
# Such a word after an article or a possessive (and at most one word between) is
# a thing the question is about, not a request: "archived on a schedule", "the
# ticket's status". Proposed for "In which note are old files rotated and
# archived on a schedule?", create_ticket was offered and proposed. "Can you
# open the ticket?" still asks to act: its verb is no such thing.
_NAMED_THING = re.compile(
    r"\b(?:a|an|the|this|that|these|those|its|their|our|your|my|his|her|each|"
    rf"every|any|some|no|which|what|whose)\s+(?:[\w'-]+\s+)?(?:{_ACTION_WORDS})s?\b",
    re.IGNORECASE,
)
# Such a word as the verb of a question about what someone else does ("How many
# gigabytes of logs does the logging system store?", "When does the worker send
# the digest?"): an auxiliary, a subject that is not the one asked (you, we, I,
# someone) and at most four words, then the verb. Proposed for that question,
# create_ticket was offered and proposed. "Can you store it?" and "Could
# someone open a ticket?" still ask to act.
_ASKED_ABOUT = re.compile(
    r"\b(?:does|do|did|will|would|can|could|should|is|are|was|were|has|have)\s+"
    r"(?!(?:you|we|i|u|someone|somebody|anyone|anybody)\b)(?:[\w'-]+\s+){1,4}?"
    rf"(?:{_ACTION_WORDS})(?:s|es|d|ed)?\b",
    re.IGNORECASE,
)
_ACTION_ZH = re.compile(
    r"创建|新建|开(?:一?[个张])?(?:工单|单)|工单|提交|发送|发(?:一?封)?邮件|发给|邮件|"
    r"通知|删除|修改|更新|记住|忘记|忘掉|保存|安排|预订|退款|部署|转告|转交|回复|"
    r"取消|支付|付款|审批|关闭|指派|分配|写一|起草|升级"
)


# A condition the question is asked under ("If we approve both plans, how much
# do we spend?", "如果两个方案都批准，…"): its verbs are a supposition, not a
# request. Only a leading clause ended by a comma; what follows it still counts.
_CONDITION = re.compile(
    r"^\s*(?:(?:if|suppose|supposing|assuming|in case)\b|假如|如果|要是|假设)"
    r"[^,，;；.。!！?？]*[,，]",
    re.IGNORECASE,
)


def asks_only(message: str) -> bool:
    """True when ``message`` asks a question and asks for no action."""
    text = message.strip()
    if not text:
        return False
    question = bool(
        _QUESTION_MARK.search(text)
        or _QUESTION_EN.match(text)
        or _QUESTION_ZH.search(text)
    )
    if not question:
        return False
    asked = _CONDITION.sub("", text, count=1)
    if _ACTION_ZH.search(asked):
        return False
    return not _ACTION_EN.search(_ASKED_ABOUT.sub(" ", _NAMED_THING.sub(" ", asked)))


@dataclass(frozen=True)
class ReadOnlyTurn:
    """The toolbox a question is offered, and the names it goes without."""

    toolbox: Toolbox
    withheld: tuple[str, ...]


def for_question(message: str, toolbox: Toolbox) -> ReadOnlyTurn | None:
    """``toolbox`` without its writes when ``message`` only asks; None when the
    message asks for an action, or nothing would be withheld."""
    withheld = tuple(
        name
        for name, spec in sorted(toolbox.specs.items())
        if spec.risk != Risk.READ_ONLY and spec.kind != ToolKind.HANDOFF
    )
    if not withheld or not asks_only(message):
        return None
    kept = {n: s for n, s in toolbox.specs.items() if n not in withheld}
    return ReadOnlyTurn(
        toolbox=Toolbox(
            specs=kept,
            handlers={n: h for n, h in toolbox.handlers.items() if n in kept},
        ),
        withheld=withheld,
    )
