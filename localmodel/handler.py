"""The ``reach-tools`` chat handler for llama-cpp-python.

Importing this module registers the handler under the chat format name
``reach-tools``, so ``Llama(..., chat_format="reach-tools")`` and the llama-cpp-python
server use it. Compared with the stock ``chatml-function-calling`` handler it

- treats tools without ``tool_choice`` as ``auto`` (the OpenAI default);
- renders ``role: "tool"`` results, as Qwen2.5's ``<tool_response>`` blocks;
- generates text answers under a grammar that allows text, so they are not empty;
- never HTML-escapes the prompt;
- tokenizes message content without control tokens, so a tool result cannot forge a
  turn;
- constrains the output in one pass: a text answer or a tool call whose arguments
  follow the tool's JSON schema (one call per reply: asked for several, the small
  model guesses the later calls' arguments before it sees the first result; a
  ``parallel_tool_calls=True`` keyword allows up to eight, but the llama-cpp-python
  server does not pass that field on).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import llama_cpp
from llama_cpp import llama_chat_format
from llama_cpp.llama_grammar import LlamaGrammar

from localmodel import CHAT_FORMAT, answering, chatformat, figures, unstated

logger = logging.getLogger(__name__)

# A reply longer than this without an explicit max_tokens is a small model looping.
DEFAULT_MAX_TOKENS = 1024


#: ``REACH_LOCAL_TOOL_FIRST=1``: the built-in model as the product's assistant
#: (tools instead of guesses). Each turn starts with a tool call (a greeting then
#: gets a search too); an answer to a Chinese question starts in Chinese; an
#: answer holding a number no message or result holds is asked again as a tool
#: call; and an answer that names none of its results' titles gets a line naming
#: the one it used (``来源：缓存改造``). The server
#: alone answers ``auto`` as OpenAI does; ``make up`` turns it on (launcher).
TOOL_FIRST = os.environ.get("REACH_LOCAL_TOOL_FIRST", "0").strip() == "1"


def tokenize_prompt(
    llama: llama_cpp.Llama, segments: Sequence[chatformat.Segment]
) -> list[int]:
    """Tokenize prompt segments: control tokens only in template segments."""
    tokens: list[int] = []
    for segment in segments:
        if segment.text:
            tokens.extend(
                llama.tokenize(
                    segment.text.encode("utf-8"), add_bos=False, special=segment.special
                )
            )
    return tokens


def reach_tools_chat_handler(
    *,
    llama: llama_cpp.Llama,
    messages: list[dict[str, Any]],
    functions: list[dict[str, Any]] | None = None,
    function_call: Any = None,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = None,
    temperature: float = 0.2,
    top_p: float = 0.95,
    top_k: int = 40,
    min_p: float = 0.05,
    typical_p: float = 1.0,
    stream: bool = False,
    stop: str | list[str] | None = None,
    seed: int | None = None,
    response_format: Any = None,
    max_tokens: int | None = None,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    repeat_penalty: float = 1.0,
    tfs_z: float = 1.0,
    mirostat_mode: int = 0,
    mirostat_tau: float = 5.0,
    mirostat_eta: float = 0.1,
    model: str | None = None,
    logits_processor: Any = None,
    grammar: LlamaGrammar | None = None,
    logit_bias: Any = None,
    logprobs: bool | None = None,
    top_logprobs: int | None = None,
    **kwargs: Any,
) -> dict[str, Any] | Iterator[dict[str, Any]]:
    """Answer one OpenAI chat request with a ``chat.completion`` dict (or, with
    ``stream``, the same completion replayed as chunks)."""

    def plan(
        choice: Any, asked: list[dict[str, Any]] | None = None
    ) -> chatformat.RequestPlan:
        return chatformat.plan_request(
            reading if asked is None else asked,
            tools,
            choice,
            functions=functions,
            function_call=function_call,
            response_format=response_format,
            parallel_tool_calls=bool(kwargs.get("parallel_tool_calls", False)),
            tool_first=TOOL_FIRST,
        )

    def complete(
        segments: Sequence[chatformat.Segment],
        grammar_text: str | None,
        wanted: int,
        **sampling: Any,
    ) -> Any:
        prompt = tokenize_prompt(llama, segments)
        room = llama.n_ctx() - len(prompt)
        if room <= 0:
            # llama.cpp's own words: the server answers them with OpenAI's 400
            # context_length_exceeded, which no client retries (any other
            # message is a 500, and clients try the same prompt again).
            raise ValueError(
                f"Requested tokens ({len(prompt)}) exceed context window of "
                f"{llama.n_ctx()}"
            )
        grammar = (
            LlamaGrammar.from_string(grammar_text, verbose=False)
            if grammar_text is not None
            else None
        )
        stops = list(chatformat.STOP_STRINGS)
        if isinstance(stop, str):
            stops.append(stop)
        elif stop:
            stops.extend(stop)
        completion: Any = llama.create_completion(
            prompt=prompt,
            max_tokens=min(wanted, room),
            top_p=top_p,
            top_k=top_k,
            min_p=min_p,
            typical_p=typical_p,
            stop=stops,
            seed=seed,
            stream=False,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            repeat_penalty=repeat_penalty,
            tfs_z=tfs_z,
            mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau,
            mirostat_eta=mirostat_eta,
            model=model,
            logits_processor=logits_processor,
            grammar=grammar,
            logit_bias=logit_bias,
            **sampling,
        )
        # Every generation of this request counts toward its usage.
        usage = completion.get("usage") or {}
        spent[0] += int(usage.get("prompt_tokens", len(prompt)))
        spent[1] += int(usage.get("completion_tokens", 0))
        return completion

    def generate(
        plan: chatformat.RequestPlan,
    ) -> tuple[chatformat.ParsedReply, Any]:
        wanted = max_tokens if max_tokens and max_tokens > 0 else DEFAULT_MAX_TOKENS
        completion = complete(
            plan.segments, plan.grammar, wanted, temperature=temperature
        )
        reply = chatformat.parse_completion(
            completion["choices"][0]["text"], plan.tool_names, tool_mode=plan.tool_mode
        )
        for error in reply.errors:
            logger.warning("local model: %s", error)
        return reply, completion

    def told(choice: Any, note: str) -> tuple[chatformat.ParsedReply, Any]:
        """Asked again with ``note`` to the model after what it reads."""
        return generate(plan(choice, [*reading, {"role": "system", "content": note}]))

    def held_to(
        rule: Callable[..., figures.Misread | None],
        reply: chatformat.ParsedReply,
        completion: Any,
        read: Sequence[dict[str, Any]],
    ) -> tuple[chatformat.ParsedReply, Any]:
        """``reply``, or, when ``rule`` finds it misreads ``read``, the answer
        asked again with the rule's note, and the rule's plain answer if the
        model misreads it the same way again."""
        misread = rule(reply.content, reply.tool_calls, read)
        if misread is None:
            return reply, completion
        logger.warning("local model: %s; asked for the answer", rule.__name__)
        reply, completion = told("none", misread.note)
        again = rule(reply.content, reply.tool_calls, read) is not None
        if again and misread.plain is not None:
            logger.warning("local model: %s again; answered plainly", rule.__name__)
            reply = chatformat.ParsedReply(content=misread.plain, tool_calls=[])
        return reply, completion

    def over_figures(
        reply: chatformat.ParsedReply, completion: Any
    ) -> tuple[chatformat.ParsedReply, Any]:
        """``reply`` held to the rules about the notes' figures (each asks
        again with a note on what went wrong)."""
        if not (assistant and auto_choice):
            return reply, completion
        for rule in (
            figures.figure_not_asked,
            figures.figure_of_another_note,
            *unstated.UNSTATED,
            unstated.thing_not_named,
        ):
            # A figure the question does not ask for, a figure the note asked
            # about does not give (another note's budget), a span, a date, a
            # person or a headcount no note found speaks of, or "which database"
            # when no note found names one: asked for the answer with that said,
            # and answered plainly if the model says it again (where the rule
            # can be sure of the plain answer).
            reply, completion = held_to(rule, reply, completion, reading)
        apart = figures.uncomputed_difference(reply.content, reply.tool_calls, reading)
        if apart is not None:
            # Two figures found for a difference, and a reply without it: the
            # calculator works it out.
            logger.warning("local model: a difference not worked out; asked for it")
            reply, completion = told(_function("calculate"), apart)
        total = figures.unstated_total(reply.content, reply.tool_calls, reading)
        if total is not None:
            # A sum of several notes answered without their total: the
            # calculator adds them all up.
            logger.warning("local model: a sum answered without its total; asked")
            reply, completion = told(_function("calculate"), total)
        return reply, completion

    def asked_again(
        reply: chatformat.ParsedReply, completion: Any
    ) -> tuple[chatformat.ParsedReply, Any]:
        """An answer the model was asked for once more (after a call made again,
        the question written back, a name as the answer): held to the figure
        rules, and a figure nothing holds is asked with the notes found said,
        then answered plainly if the model gives it again. "approximately 10
        gigabytes" had come back after the question written back, where only
        the figure rules held it (4 of 4)."""
        reply, completion = over_figures(reply, completion)
        return held_to(unstated.invented_figure, reply, completion, messages)

    def search_again(miss: answering.Miss) -> tuple[chatformat.ParsedReply, Any] | None:
        """The missed search's words translated by the model, searched again."""
        asked = answering.translation_prompt(miss)
        completion = complete(
            chatformat.render_prompt(asked, [], tool_mode=False),
            answering.translation_grammar(miss.into),
            answering.TRANSLATION_MAX_TOKENS,
            temperature=0.0,
        )
        words = answering.expanded(miss, completion["choices"][0]["text"])
        if words is None:
            return None
        logger.info("local model: searched again as %r", words)
        call = answering.search_call(miss, words)
        return chatformat.ParsedReply(content=None, tool_calls=[call]), completion

    spent = [0, 0]  # prompt and completion tokens, over every generation
    # What every generation of this request reads (``plan`` asks with it).
    reading = messages
    first = plan(tool_choice)
    assistant = TOOL_FIRST and first.tool_mode and bool(first.tools)
    auto_choice = first.tool_choice.mode == "auto"
    miss = (
        answering.missed_search(messages, first.tools)
        if assistant and auto_choice
        else None
    )
    again = search_again(miss) if miss is not None else None
    # Every search of the turn found nothing (read at the start and at the end).
    all_missed = assistant and answering.searches_all_missed(messages)
    if again is not None:
        reply, completion = again
    elif all_missed:
        # Every search of the turn found nothing: the answer is asked with that
        # said plainly, or a small model fills the gap with a made-up fact. So is
        # every later ask of this request (a call made again was asked for the
        # answer with the notes a name search had found by other words).
        reading = answering.said_plainly(reading)
        reply, completion = generate(plan(tool_choice))
    else:
        reply, completion = generate(first)
    leak = (
        chatformat.find_leak(reply.content, first.tools)
        if first.tool_mode and not reply.tool_calls
        else None
    )
    if leak is not None:
        # The handler's call syntax (or a schema) in an answer: never shown. Make
        # the call it spells out, or ask again for a call of the tool it names.
        logger.warning("local model: a call written as text: %r", leak.text[:200])
        if leak.call is not None:
            reply = chatformat.ParsedReply(content=None, tool_calls=[leak.call])
        else:
            forced = _function(leak.name) if leak.name else "required"
            reply, completion = generate(plan(forced))
    instead = (
        answering.invented_calculation(reply.tool_calls, messages, first.tools)
        if assistant and reply.tool_calls
        else None
    )
    if instead is not None:
        # A calculation with a figure nobody gave: the figures are in the
        # notes. Ask for the search instead.
        logger.warning("local model: a calculation from nowhere; asked for %s", instead)
        reply, completion = generate(plan(_function(instead)))
    combine = (
        figures.uncombined_calculation(reply.tool_calls, reading)
        if assistant and reply.tool_calls
        else None
    )
    if combine is not None:
        # A sum over several notes worked out for one of them: ask again for one
        # calculation over all their figures.
        logger.warning("local model: one note's figures for a sum; asked again")
        reply, completion = told(_function("calculate"), combine)
    second = (
        figures.unsearched_second_note(reply.tool_calls, reading, first.tools)
        if assistant and reply.tool_calls and combine is None
        else None
    )
    if second is not None:
        # A sum of two named things, calculated after one search found one of
        # them: ask for the search of the other first.
        logger.warning("local model: a sum of two with one searched; asked to search")
        search, note = second
        reply, completion = told(_function(search), note)
    made_up = (
        chatformat.made_up_numbers(reply.content, messages)
        if assistant and not reply.tool_calls
        else []
    )
    if made_up and auto_choice:
        # A sum done in its head: ask again for a call (the calculator, in
        # practice); the answer then quotes the tool's result.
        logger.warning(
            "local model: numbers from nowhere %s; asked for a call", made_up
        )
        reply, completion = generate(plan("required"))
    quoted = (
        figures.uncomputed_expression(reply.content, first.tools)
        if assistant and auto_choice and not reply.tool_calls
        else None
    )
    if quoted is not None:
        # "The budget is 500 + 240": the calculator works it out.
        logger.warning("local model: %r not computed; asked for calculate", quoted)
        reply, completion = generate(plan(_function("calculate")))
    reply, completion = over_figures(reply, completion)
    if (
        assistant
        and auto_choice
        and reply.tool_calls
        and answering.repeats_a_call(reply.tool_calls, messages)
    ):
        # A call this turn already made: its result is above. Ask for the
        # answer, which is then held to the same rules as any answer (most
        # answers of a turn with figures come this way).
        logger.warning("local model: a call made again; asked for the answer")
        reply, completion = asked_again(*generate(plan("none")))
    if (
        assistant
        and auto_choice
        and not reply.tool_calls
        and answering.repeats_question(reply.content, messages)
    ):
        # The user's question written back as the answer: asked once more.
        logger.warning("local model: the question as the answer; asked again")
        reply, completion = asked_again(*told("none", answering.ANSWER_IT))
    if (
        assistant
        and auto_choice
        and not reply.tool_calls
        and answering.identifier_as_answer(reply.content)
    ):
        # A name in code as the whole answer: asked once for a sentence.
        logger.warning("local model: a name as the answer; asked again")
        reply, completion = asked_again(*told("none", answering.SAY_IT))
    if (
        assistant
        and not reply.tool_calls
        and answering.echoed_hint(reply.content, messages)
    ):
        # The search's hint given as the answer: asked again with the result
        # said plainly, then the plain fact itself.
        logger.warning("local model: the tool's hint as the answer; asked again")
        reply, completion = generate(plan("none", answering.said_plainly(reading)))
        if not reply.content or answering.echoed_hint(reply.content, messages):
            reply = chatformat.ParsedReply(
                content=answering.nothing_found(messages), tool_calls=[]
            )
    if assistant and reply.content and not reply.tool_calls and all_missed:
        # Every search found nothing. An answer that still gives a figure made
        # it up ("set aside for $10,000"): the plain fact instead. One that
        # does not say nothing was found (it described Grafana from its own
        # knowledge) says so first.
        plain = answering.nothing_found(messages)
        if chatformat.made_up_numbers(reply.content, messages):
            logger.warning("local model: a figure after every search missed")
            reply = chatformat.ParsedReply(content=plain, tool_calls=[])
        elif not answering.says_none(reply.content or ""):
            logger.warning("local model: an answer after every search missed")
            reply = chatformat.ParsedReply(
                content=f"{plain}\n\n{reply.content}", tool_calls=[]
            )
    wrote_error = (
        answering.error_as_answer(reply.content, messages)
        if assistant and not reply.tool_calls and not response_format
        else None
    )
    if wrote_error is not None:
        # An error object of its own making as the answer, with notes found.
        logger.warning("local model: an error object as the answer; asked again")
        reply, completion = told("none", wrote_error)
    if assistant and reply.content and not reply.tool_calls and not response_format:
        # {"content": "…"} or "…" around the answer: the text inside is it.
        reply = chatformat.ParsedReply(
            content=answering.unwrapped(reply.content), tool_calls=[]
        )
    source = (
        # A total cites every note it adds up; another answer, the one it shares
        # the most with.
        figures.calculated_source(reply.content, messages)
        or chatformat.source_line(reply.content, messages)
        if TOOL_FIRST and not reply.tool_calls
        else None
    )
    if source is None and assistant and not reply.tool_calls:
        # An answer in another language than the note it is about shares no
        # character with it: the note its search found alone is cited.
        source = answering.searched_source(reply.content, messages)
    if source is not None:
        reply = chatformat.ParsedReply(
            content=f"{(reply.content or '').rstrip()}\n\n{source}",
            tool_calls=reply.tool_calls,
        )
    choice = completion["choices"][0]
    result = chatformat.build_chat_completion(
        reply,
        model=completion["model"],
        prompt_tokens=spent[0],
        completion_tokens=spent[1],
        finish_reason=choice.get("finish_reason"),
        completion_id="chat" + completion["id"],
        created=completion["created"],
    )
    if stream:
        return chatformat.completion_chunks(result)
    return result


def _function(name: str) -> dict[str, Any]:
    """The ``tool_choice`` that asks for a call of the tool ``name``."""
    return {"type": "function", "function": {"name": name}}


def register() -> None:
    """Register the handler under ``reach-tools`` (done on import; idempotent)."""
    registry = llama_chat_format.LlamaChatCompletionHandlerRegistry()
    registry.register_chat_completion_handler(
        CHAT_FORMAT,
        cast(llama_chat_format.LlamaChatCompletionHandler, reach_tools_chat_handler),
        overwrite=True,
    )


register()
