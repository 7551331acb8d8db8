"""Tool calling for Qwen2.5-Coder-Instruct in ChatML, in pure Python.

This module knows nothing about llama.cpp. It renders OpenAI chat messages and tool
definitions into a ChatML prompt, builds a GBNF grammar that lets the model answer
either with a text message or with one or more tool calls whose arguments follow each
tool's JSON schema (compiled by :mod:`localmodel.grammar`), and parses the generated
text back into an OpenAI ``chat.completion`` dict.

The reply convention is the one of llama-cpp-python's ``chatml-function-calling``
format: a reply starts with ``message:`` (text) or ``functions.<name>:`` followed by
the JSON arguments. Qwen2.5-Coder makes that choice reliably, whereas with Qwen's
native ``<tool_call>`` convention it answers with fenced JSON (measured: even a
greeting comes back as a JSON "call"). Tool results go back as Qwen's
``<tool_response>`` blocks in a user turn.

The prompt is returned as segments: template text, which may hold control tokens such
as ``<|im_start|>``, and content (messages, tool results, tool definitions), which the
handler tokenizes without special tokens so a tool result cannot forge a turn.
Nothing is HTML-escaped.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from localmodel.grammar import Grammar, SchemaConverter, _excluding_rules, gbnf_literal

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"
STOP_STRINGS: tuple[str, ...] = (IM_END, END_OF_TEXT)
MESSAGE_PREFIX = "message:"
FUNCTION_PREFIX = "functions."

DEFAULT_SYSTEM = "You are a helpful assistant."
# Calls in one reply when parallel tool calls are asked for. By default a reply holds
# one call: asked for more, the small model guesses a second call's arguments before
# seeing the first one's result (measured: search_notes plus calculate("sum(预算)")).
MAX_TOOL_CALLS = 8

TOOLS_INTRO = "\n\nYou have access to the following functions:\n"
TOOLS_USAGE = (
    "\n\nYou can respond to users messages with either a single message or one or "
    "more function calls."
    "\n\nTo respond with a message begin the message with 'message:', use the "
    "following format:"
    "\n\nmessage:\n<message>"
    "\n\nTo respond with one or more function calls begin the message with "
    "'functions.<function_name>:', use the following format:"
    "\n\nfunctions.<function_name>:"
    '\n{ "arg1": "value1", "arg2": "value2" }'
    "\nfunctions.<function_name>:"
    '\n{ "arg1": "value1", "arg2": "value2" }'
)


class Segment(NamedTuple):
    """A piece of the prompt.

    ``special`` is true for template text, which is tokenized with control tokens
    (``<|im_start|>``...); content segments are tokenized as plain text.
    """

    text: str
    special: bool


@dataclass(frozen=True)
class ToolChoice:
    """The resolved ``tool_choice``: mode ``none``, ``auto``, ``required`` or
    ``function`` (then ``name`` is the one tool the model must call)."""

    mode: str
    name: str | None = None


@dataclass
class RequestPlan:
    """Everything the handler needs to run one chat request through the model."""

    segments: list[Segment]
    grammar: str | None
    tool_names: list[str]
    tool_choice: ToolChoice
    tool_mode: bool
    #: The tools offered to the model (OpenAI form), for :func:`find_leak`.
    tools: list[dict[str, Any]] = field(default_factory=list)

    @property
    def prompt(self) -> str:
        """The prompt as one string (for logs and tests)."""
        return prompt_text(self.segments)


@dataclass
class ParsedReply:
    """The model's output split into text content and OpenAI tool calls."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- input


def content_text(content: Any) -> str:
    """Return a message's ``content`` as text (string, ``None`` or a parts list)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, Mapping):
                if part.get("type", "text") == "text":
                    texts.append(str(part.get("text", "")))
                else:
                    texts.append(f"[{part.get('type')}]")
            else:
                texts.append(str(part))
        return "".join(texts)
    return json.dumps(content, ensure_ascii=False)


def normalize_tools(
    tools: Sequence[Mapping[str, Any]] | None,
    functions: Sequence[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Return the function tools in OpenAI ``{"type": "function", "function": ...}``
    form, accepting the legacy ``functions`` list too."""
    result: list[dict[str, Any]] = []
    for tool in tools or ():
        function = tool.get("function")
        if tool.get("type", "function") == "function" and isinstance(function, Mapping):
            result.append({"type": "function", "function": dict(function)})
    for function in functions or ():
        result.append({"type": "function", "function": dict(function)})
    return result


def resolve_tool_choice(
    tools: Sequence[Mapping[str, Any]],
    tool_choice: Any = None,
    function_call: Any = None,
) -> ToolChoice:
    """Resolve OpenAI's ``tool_choice`` (or legacy ``function_call``).

    Unlike llama-cpp-python's stock handler, a request with tools and no
    ``tool_choice`` means ``auto``, as in the OpenAI API.
    """
    if tool_choice is None and function_call is not None:
        tool_choice = function_call
    if not tools:
        return ToolChoice("none")
    if tool_choice is None:
        return ToolChoice("auto")
    if isinstance(tool_choice, str):
        if tool_choice in ("none", "auto", "required"):
            return ToolChoice(tool_choice)
        raise ValueError(f"unsupported tool_choice {tool_choice!r}")
    if isinstance(tool_choice, Mapping):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        name = name or tool_choice.get("name")
        if not name:
            return ToolChoice("auto")
        if name not in {tool["function"]["name"] for tool in tools}:
            raise ValueError(f"tool_choice names unknown tool {name!r}")
        return ToolChoice("function", str(name))
    raise ValueError(f"unsupported tool_choice {tool_choice!r}")


# ------------------------------------------------------------------------ rendering


def _arguments_json(call: Mapping[str, Any]) -> str:
    raw = call.get("arguments", "{}")
    if isinstance(raw, str):
        try:
            return json.dumps(
                json.loads(raw) if raw.strip() else {}, ensure_ascii=False
            )
        except ValueError:
            return raw
    return json.dumps(raw, ensure_ascii=False)


def uses_tools(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
) -> bool:
    """True when the request offers tools or its history holds tool calls or results:
    then the ``message:`` / ``functions.<name>:`` convention is used."""
    return bool(tools) or any(
        message.get("role") in ("tool", "function")
        or message.get("tool_calls")
        or message.get("function_call")
        for message in messages
    )


_HAN = re.compile(r"[\u4e00-\u9fff]")

#: The label of the line naming an answer's source, or its sources, and how
#: several are joined, by the asker's language.
_SOURCE_LABEL = {
    "zh": ("来源：", "来源：", "、"),
    "en": ("Source: ", "Sources: ", ", "),
}


def _bigrams(text: str) -> set[str]:
    text = re.sub(r"\s+", "", text.lower())
    return {text[i : i + 2] for i in range(len(text) - 1)}


_RESULT_ROLES = ("tool", "function")


def _this_turn(messages: Sequence[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    """The messages after the last user message: the turn being answered."""
    for at in range(len(messages) - 1, -1, -1):
        if messages[at].get("role") == "user":
            return messages[at + 1 :]
    return messages


#: The product's handoff tools (engine.handoff's ``transfer_to_<agent>``): a turn
#: that only handed the conversation to another agent has not answered yet.
HANDOFF_PREFIX = "transfer_to_"


def awaits_first_reply(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Nothing answered the user's last message yet. Platform notes (``system``:
    what the agent remembers for this user, say) may stand after it, and so may a
    handoff (a call of ``transfer_to_<agent>`` and its result): the agent it went
    to answers first."""
    if not any(m.get("role") == "user" for m in messages):
        return False
    handoffs: set[Any] = set()
    for message in _this_turn(messages):
        role = message.get("role")
        if role == "system":
            continue
        if role == "assistant" and _only_handoffs(message):
            handoffs.update(call.get("id") for call in message["tool_calls"])
            continue
        if role in _RESULT_ROLES and message.get("tool_call_id") in handoffs:
            continue
        return False
    return True


def _only_handoffs(message: Mapping[str, Any]) -> bool:
    calls = message.get("tool_calls")
    if not calls or content_text(message.get("content")).strip():
        return False
    return all(
        isinstance(call, Mapping)
        and str((call.get("function") or {}).get("name", "")).startswith(HANDOFF_PREFIX)
        for call in calls
    )


def _titled_results(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The items with a ``title`` in the turn's tool results, the latest first."""
    items: list[Mapping[str, Any]] = []
    for message in reversed(_this_turn(messages)):
        if message.get("role") not in _RESULT_ROLES:
            continue
        try:
            value = json.loads(content_text(message.get("content")))
        except ValueError:
            continue
        found = value if isinstance(value, list) else [value]
        items += [
            i for i in found if isinstance(i, dict) and isinstance(i.get("title"), str)
        ]
    return items


def source_line(
    content: str | None, messages: Sequence[Mapping[str, Any]]
) -> str | None:
    """The line naming the source an answer used, when it names none itself.

    The sources are the titled items of the turn's tool results (a note's title,
    say); the one an answer used is the item whose title and content share the
    most character pairs with it. None when the answer already names one of them,
    or no result has a title, or the answer shares nothing with any.
    """
    if not content:
        return None
    items = _titled_results(messages)
    if not items or any(str(i["title"]) in content for i in items):
        return None
    said = _bigrams(content)
    scored = [
        (len(said & _bigrams(f"{i['title']} {i.get('content', '')}")), n)
        for n, i in enumerate(items)
    ]
    best, at = max(scored, key=lambda pair: (pair[0], -pair[1]))
    if best == 0:
        return None
    return cite([str(items[at]["title"])], messages)


def cite(titles: Sequence[str], messages: Sequence[Mapping[str, Any]]) -> str:
    """The line naming ``titles`` as an answer's sources, in the asker's language."""
    one, several, separator = _SOURCE_LABEL[asker_language(messages)]
    return (one if len(titles) == 1 else several) + separator.join(titles)


_LATIN_WORD = re.compile(r"[A-Za-z]+")


def last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text of the last user message ("" when there is none)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return content_text(message.get("content")).strip()
    return ""


def asker_language(messages: Sequence[Mapping[str, Any]]) -> str:
    """``zh`` when the last user message is written in Chinese (more Chinese
    characters than Latin words: an English question may quote a Chinese name),
    else ``en``."""
    text = last_user_text(messages)
    return "zh" if len(_HAN.findall(text)) > len(_LATIN_WORD.findall(text)) else "en"


#: The first letter of an answer in each language's script (GBNF classes).
#: A lowercase "f" is not followed by "u": the text after it is free of a
#: line starting "functions." only from its second character on, and the model
#: had written "functions.search_notes: …" as an answer that way.
_FIRST_LETTER = {"zh": "[\u4e00-\u9fff]", "en": '([A-Za-eg-z] | "f" [^u])'}
#: A letter of neither the Latin nor the Chinese script (Cyrillic, kana, …).
_OTHER_LETTER = re.compile(r"[^\W\d_A-Za-z\u00c0-\u024f\u4e00-\u9fff]")


def answer_language(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The language whose script an answer to the last user message starts in:
    its :func:`asker_language`, or None when that message has letters of
    another script or, asked in English, no Latin word at all ("2 + 2?")."""
    text = last_user_text(messages)
    if _OTHER_LETTER.search(text):
        return None
    language = asker_language(messages)
    if language == "en" and not _LATIN_WORD.search(text):
        return None
    return language


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
#: Tool results after the user's message past which a made-up number is let be
#: (the run's own stop conditions end a model that keeps inventing them).
GUARDED_RESULTS = 4


def _numbers(text: str) -> set[str]:
    return {match.replace(",", "") for match in _NUMBER.findall(text)}


def made_up_numbers(
    content: str | None, messages: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Numbers in a text answer that neither the user nor any tool result (nor a
    call's arguments) of the conversation holds: worked out in the model's head.

    Only after a tool result, and for the first few results of a turn; empty
    otherwise (a greeting's answer, a user who gave the numbers themselves).
    """
    if not content or not messages or messages[-1].get("role") not in _RESULT_ROLES:
        return []
    results = sum(m.get("role") in _RESULT_ROLES for m in _this_turn(messages))
    if results > GUARDED_RESULTS:
        return []
    known: set[str] = set()
    for message in messages:
        role = message.get("role")
        if role == "user" or role in _RESULT_ROLES:
            known |= _numbers(content_text(message.get("content")))
        for call in message.get("tool_calls") or ():
            known |= _numbers(_arguments_json(call.get("function", call)))
    return sorted(_numbers(content) - known)


def render_prompt(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    tool_mode: bool | None = None,
    add_generation_prompt: bool = True,
) -> list[Segment]:
    """Render OpenAI chat messages (and tools) as ChatML prompt segments.

    In tool mode (the default when there are tools or tool messages), the system turn
    lists the tools as ``functions.<name>:`` with description and parameter schema,
    assistant turns are written ``message:`` + text and ``functions.<name>:`` + JSON
    arguments, and consecutive ``tool`` messages become one user turn of
    ``<tool_response>`` blocks. Otherwise the prompt is plain ChatML.
    """
    if tool_mode is None:
        tool_mode = uses_tools(messages, tools or ())
    segments: list[Segment] = []

    def template(text: str) -> None:
        segments.append(Segment(text, True))

    def content(text: str) -> None:
        if text:
            segments.append(Segment(text, False))

    rest = list(messages)
    system = DEFAULT_SYSTEM
    if rest and rest[0].get("role") in ("system", "developer"):
        system = content_text(rest.pop(0).get("content"))
    template(f"{IM_START}system\n")
    content(system)
    if tool_mode and tools:
        template(TOOLS_INTRO)
        for tool in tools:
            function = tool["function"]
            parameters = function.get("parameters") or {}
            lines = [f"{FUNCTION_PREFIX}{function['name']}:"]
            if function.get("description"):
                lines.append(str(function["description"]))
            lines.append(json.dumps(parameters, ensure_ascii=False))
            template("\n")
            content("\n".join(lines))
            template("\n")
        template(TOOLS_USAGE)
    template(f"{IM_END}\n")

    index = 0
    while index < len(rest):
        message = rest[index]
        role = message.get("role")
        if role in ("user", "system", "developer"):
            turn = "user" if role == "user" else "system"
            template(f"{IM_START}{turn}\n")
            content(content_text(message.get("content")))
            template(f"{IM_END}\n")
        elif role == "assistant":
            template(f"{IM_START}assistant\n")
            text = content_text(message.get("content"))
            calls = list(message.get("tool_calls") or ())
            if not calls and message.get("function_call"):
                calls = [{"function": message["function_call"]}]
            if text and tool_mode:
                template(f"{MESSAGE_PREFIX}\n")
            content(text)
            for number, call in enumerate(calls):
                function = call.get("function", call)
                if text or number:
                    template("\n")
                template(FUNCTION_PREFIX)
                content(str(function.get("name", "")))
                template(":\n")
                content(_arguments_json(function))
            template(f"{IM_END}\n")
        elif role in ("tool", "function"):
            template(f"{IM_START}user")
            while index < len(rest) and rest[index].get("role") in ("tool", "function"):
                template(f"\n{TOOL_RESPONSE_OPEN}\n")
                content(content_text(rest[index].get("content")))
                template(f"\n{TOOL_RESPONSE_CLOSE}")
                index += 1
            template(f"{IM_END}\n")
            continue
        else:
            raise ValueError(f"unsupported message role {role!r}")
        index += 1
    if add_generation_prompt:
        template(f"{IM_START}assistant\n")
    return segments


def prompt_text(segments: Sequence[Segment]) -> str:
    """Join prompt segments into one string."""
    return "".join(segment.text for segment in segments)


# -------------------------------------------------------------------------- grammar


def _tool_call_rules(grammar: Grammar, tools: Sequence[Mapping[str, Any]]) -> str:
    calls: list[str] = []
    for tool in tools:
        function = tool["function"]
        tool_name = str(function["name"])
        parameters = function.get("parameters")
        rule = f"args-{tool_name}"
        if parameters is None:
            arguments = gbnf_literal("{}")
        else:
            arguments = SchemaConverter(grammar, parameters).visit(parameters, rule)
        head = gbnf_literal(f"{FUNCTION_PREFIX}{tool_name}:\n")
        calls.append(grammar.add(f"call-{tool_name}", f"{head} {arguments}"))
    return grammar.add("tool-call", " | ".join(calls))


def response_format_schema(response_format: Any) -> Any:
    """The JSON schema a ``response_format`` asks for, or ``None`` for free text."""
    if not isinstance(response_format, Mapping):
        return None
    kind = response_format.get("type")
    if kind == "json_object":
        return response_format.get("schema") or {"type": "object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema") or {}
        return spec.get("schema") or {"type": "object"}
    return None


def build_grammar(
    tools: Sequence[Mapping[str, Any]],
    tool_choice: ToolChoice,
    response_format: Any = None,
    *,
    tool_mode: bool | None = None,
    max_calls: int = 1,
    answer_script: str | None = None,
    text_then_calls: bool = True,
) -> str | None:
    """Return the GBNF grammar for a request, or ``None`` for unconstrained text.

    In tool mode a reply is ``message:`` and text (which never contains a line
    starting ``functions.``), or one to ``max_calls`` calls ``functions.<name>:`` +
    arguments following that tool's schema, or a message followed by calls.
    ``required`` allows only calls, a named function exactly one call of it, ``none``
    only a message. A ``response_format`` JSON schema constrains the text. Without
    tools the text is free unless a ``response_format`` asks for JSON. With
    ``answer_script`` (``zh`` or ``en``) a text message starts with a letter of
    that script (an answer to a question asked in it); with ``text_then_calls``
    False a reply is text or calls, never both.
    """
    if tool_mode is None:
        tool_mode = bool(tools)
    grammar = Grammar()
    schema = response_format_schema(response_format)
    answer: str | None = None
    if schema is not None:
        answer = SchemaConverter(grammar, schema).visit(schema, "answer")
    if not tool_mode:
        if answer is None:
            return None
        grammar.define("root", answer)
        return grammar.render()
    if answer is None:
        text = _excluding_rules(grammar, "text", f"\n{FUNCTION_PREFIX}")
        head = gbnf_literal(MESSAGE_PREFIX)
        if answer_script is not None:
            head += f' "\\n"? {_FIRST_LETTER[answer_script]}'
        message = grammar.add("message", f"{head} {text}")
    else:
        head = gbnf_literal(f"{MESSAGE_PREFIX}\n")
        message = grammar.add("message", f"{head} {answer}")
    if not tools or tool_choice.mode == "none":
        grammar.define("root", message)
        return grammar.render()
    if tool_choice.mode == "function":
        chosen = [t for t in tools if t["function"]["name"] == tool_choice.name]
        grammar.define("root", f'{_tool_call_rules(grammar, chosen)} "\\n"{{0,2}}')
        return grammar.render()
    call = _tool_call_rules(grammar, tools)
    # Newlines may end the last call: the model likes to end one with "}\n\n", and
    # must then still be free to stop rather than be pushed into another call.
    more = f' ("\\n" {call}){{0,{max_calls - 1}}}' if max_calls > 1 else ""
    calls = grammar.add("tool-calls", f'{call}{more} "\\n"{{0,2}}')
    if tool_choice.mode == "required":
        grammar.define("root", calls)
    elif not text_then_calls:
        grammar.define("root", f"{calls} | {message}")
    else:
        grammar.define("root", f'{calls} | {message} | {message} "\\n" {calls}')
    return grammar.render()


def plan_request(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: Any = None,
    *,
    functions: Sequence[Mapping[str, Any]] | None = None,
    function_call: Any = None,
    response_format: Any = None,
    parallel_tool_calls: bool = False,
    tool_first: bool = False,
) -> RequestPlan:
    """Render the prompt and build the grammar for one chat request.

    A reply holds at most one tool call unless ``parallel_tool_calls`` is true
    (then up to ``MAX_TOOL_CALLS``). With ``tool_first``, the first reply to a
    user's message under ``auto`` must be a tool call: a 1.5B model otherwise
    answers sums and note questions from memory, wrongly (docs/stack-notes.md,
    "The built-in model").
    """
    offered = normalize_tools(tools, functions)
    choice = resolve_tool_choice(offered, tool_choice, function_call)
    if tool_first and choice.mode == "auto" and awaits_first_reply(messages):
        choice = ToolChoice("required")
    shown = offered if choice.mode != "none" else []
    tool_mode = uses_tools(messages, shown)
    # The small model often answers a Chinese question in English after reading
    # English tool output (an error message, say): its answer starts in Chinese.
    # And an English question in Chinese after reading a Chinese note ("计算结果是
    # 1088。" for "When is the caching rework due?"): its answer starts in
    # English.
    # So does an answer asked again with a note after the results (the
    # handler's ``told``): told that no note names a person, the model answered
    # 缓存改造的负责人是谁？ in English (3 of 3).
    last: Mapping[str, Any] = next(
        (m for m in reversed(messages) if m.get("role") != "system"), {}
    )
    answer_script = (
        answer_language(messages)
        if tool_first and last.get("role") in _RESULT_ROLES
        else None
    )
    return RequestPlan(
        segments=render_prompt(messages, shown, tool_mode=tool_mode),
        grammar=build_grammar(
            shown,
            choice,
            response_format,
            tool_mode=tool_mode,
            max_calls=MAX_TOOL_CALLS if parallel_tool_calls else 1,
            answer_script=answer_script,
            # Text before a call is where the small model does sums in its head
            # ("the total is 944") and then calls the calculator on its guess.
            text_then_calls=not tool_first,
        ),
        tool_names=[tool["function"]["name"] for tool in shown],
        tool_choice=choice,
        tool_mode=tool_mode,
        tools=list(shown),
    )


# -------------------------------------------------------------------------- parsing

_CALL_HEAD = re.compile(r"\s*" + re.escape(FUNCTION_PREFIX) + r"([^\s:]+):\s*")
_DECODER = json.JSONDecoder()


def new_tool_call_id() -> str:
    """A fresh OpenAI-style tool call id."""
    return f"call_{uuid.uuid4().hex[:24]}"


def _parse_calls(
    text: str, tool_names: Sequence[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    calls: list[dict[str, Any]] = []
    errors: list[str] = []
    seen: set[tuple[str, str]] = set()
    position = 0
    while position < len(text) and text[position:].strip():
        head = _CALL_HEAD.match(text, position)
        if head is None:
            errors.append(f"unexpected text after the calls: {text[position:][:200]!r}")
            break
        name = head.group(1)
        try:
            arguments, position = _DECODER.raw_decode(text, head.end())
        except ValueError as error:
            errors.append(f"arguments of {name} are not valid JSON ({error})")
            break
        if name not in tool_names:
            errors.append(f"call names unknown tool {name!r}")
        elif not isinstance(arguments, dict):
            errors.append(f"arguments of {name} are not an object")
        else:
            encoded = json.dumps(arguments, ensure_ascii=False)
            # Drop a repeat of the same call in one reply: a looping small model.
            if (name, encoded) not in seen:
                seen.add((name, encoded))
                calls.append(
                    {
                        "id": new_tool_call_id(),
                        "type": "function",
                        "function": {"name": name, "arguments": encoded},
                    }
                )
    return calls, errors


def parse_completion(
    text: str, tool_names: Sequence[str] = (), *, tool_mode: bool = True
) -> ParsedReply:
    """Split generated text into content and tool calls.

    In tool mode the text after ``message:`` is the content, and each
    ``functions.<name>:`` with JSON arguments naming one of ``tool_names`` becomes an
    OpenAI tool call (repeats of the same call are dropped). A call that does not
    parse (for example cut off by ``max_tokens``) is reported in ``errors``; when no
    call parses the whole text is returned as content, so nothing is lost.
    """
    if not tool_mode:
        return ParsedReply(content=text.strip() or None)
    body = text.lstrip()
    content: str | None = None
    if body.startswith(MESSAGE_PREFIX):
        body = body[len(MESSAGE_PREFIX) :]
        cut = body.find(f"\n{FUNCTION_PREFIX}") if tool_names else -1
        if cut < 0:
            return ParsedReply(content=body.strip() or None)
        content, body = body[:cut].strip() or None, body[cut + 1 :]
    elif not (tool_names and body.startswith(FUNCTION_PREFIX)):
        return ParsedReply(content=text.strip() or None)
    calls, errors = _parse_calls(body, tool_names)
    if not calls:
        return ParsedReply(content=text.strip() or None, errors=errors)
    return ParsedReply(content=content, tool_calls=calls, errors=errors)


# ---------------------------------------------------------------- leaked calls

#: A call written as text: "functions calculate: 128 * 6", "functions.search_notes:
#: {...}", "function calculate(...)". Only a name of an offered tool counts.
_LEAK_HEAD = re.compile(
    r"(?i)(?<![\w])functions?\s*[.:\s]\s*(?P<name>[a-z][a-z0-9_]*)\s*[:(]?[ \t]*"
)
_FENCE = re.compile(r"^```[a-z]*\s*|\s*```$")


@dataclass(frozen=True)
class Leak:
    """A final answer that carries the handler's call syntax or a schema.

    ``call`` is the real tool call it stands for when the text says enough to
    make one; else ``name`` is the tool it names (None for a bare schema), and
    the handler asks the model again, for a call.
    """

    name: str | None
    call: dict[str, Any] | None
    text: str


def _tool_call(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "id": new_tool_call_id(),
        "type": "function",
        "function": {
            "name": name,
            "arguments": json.dumps(arguments, ensure_ascii=False),
        },
    }


def _sole_string_parameter(tool: Mapping[str, Any]) -> str | None:
    """The one required parameter of ``tool`` when it is a string (calculate's
    ``expression``, search_notes' ``query``), else None."""
    parameters = tool.get("function", {}).get("parameters") or {}
    required = parameters.get("required") or []
    properties = parameters.get("properties") or {}
    if len(required) != 1:
        return None
    spec = properties.get(required[0]) or {}
    return str(required[0]) if spec.get("type") == "string" else None


def _looks_like_schema_or_call(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    keys = set(value)
    return bool(
        {"properties", "$schema"} & keys
        or (value.get("type") == "object" and "properties" in keys)
        or ("name" in keys and keys & {"arguments", "parameters"})
    )


def find_leak(content: str | None, tools: Sequence[Mapping[str, Any]]) -> Leak | None:
    """The call syntax or schema in a final answer, or None when it is plain text.

    A small model sometimes writes its call as prose ("functions calculate: 128 * 6
    + 320") or answers with a tool's JSON schema; a user must never see either.
    """
    text = _FENCE.sub("", (content or "").strip())
    if not text:
        return None
    by_name = {str(t["function"]["name"]): t for t in tools}
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if _looks_like_schema_or_call(whole):
        name = whole.get("name") if isinstance(whole.get("name"), str) else None
        arguments = whole.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = None
        if name in by_name and isinstance(arguments, dict):
            return Leak(name, _tool_call(name, arguments), text)
        return Leak(name if name in by_name else None, None, text)
    for head in _LEAK_HEAD.finditer(text):
        name = head.group("name")
        if name not in by_name:
            continue
        rest = text[head.end() :]
        try:
            arguments, _ = _DECODER.raw_decode(rest.lstrip())
        except ValueError:
            arguments = None
        if isinstance(arguments, dict):
            return Leak(name, _tool_call(name, arguments), text)
        parameter = _sole_string_parameter(by_name[name])
        value = (
            rest.splitlines()[0].strip().strip("`").rstrip(")").strip() if rest else ""
        )
        if parameter is not None and value:
            return Leak(name, _tool_call(name, {parameter: value}), text)
        return Leak(name, None, text)
    return None


def build_chat_completion(
    reply: ParsedReply,
    *,
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
    finish_reason: str | None = "stop",
    completion_id: str | None = None,
    created: int | None = None,
) -> dict[str, Any]:
    """Build an OpenAI ``chat.completion`` dict from a parsed reply.

    ``finish_reason`` is the raw one (``stop`` or ``length``); it becomes
    ``tool_calls`` when the reply holds tool calls.
    """
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
        finish_reason = "tool_calls"
    return {
        "id": completion_id or f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def completion_chunks(completion: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Replay a finished ``chat.completion`` as ``chat.completion.chunk`` dicts
    (for ``stream=True`` clients): the role, the content, each tool call, the end,
    which carries the usage (what ``stream_options.include_usage`` asks for; the
    llama-cpp server passes no stream options on, and a client that did not ask
    ignores it), so a streamed reply adds up to the very completion."""
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": completion["id"],
            "object": "chat.completion.chunk",
            "created": completion["created"],
            "model": completion["model"],
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            ],
        }

    yield chunk({"role": "assistant", "content": None})
    if message.get("content") is not None:
        yield chunk({"content": message["content"]})
    for index, call in enumerate(message.get("tool_calls") or ()):
        yield chunk({"tool_calls": [{"index": index, **call}]})
    end = chunk({}, choice["finish_reason"])
    if completion.get("usage") is not None:
        end["usage"] = completion["usage"]
    yield end
