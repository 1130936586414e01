"""OpenAI-compatible routes: /v1/models[/{id}], /v1/completions, /v1/chat/completions.

Completions: ``echo`` (prompt text, tokens and logprobs with per-position top logprobs, from
the same tensor as the chosen tokens'), ``best_of``, ``logit_bias``, structured outputs. Chat:
``tools`` / ``tool_choice`` (``hinge.server.chat``, ``tool_parsers``), ``reasoning_content``
(``hinge.server.reasoning``), ``response_format``, ``chat_template_kwargs``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from hinge.engine.async_engine import RequestHandle
from hinge.server.chat import ChatPrompt, build_chat_prompt
from hinge.server.context import (
    APIError,
    ServerContext,
    drain_all,
    sse_stream,
    unless_disconnected,
)
from hinge.server.native import check_fit, ctx_of, merge, stream_delta, submit_all
from hinge.server.protocol import ChatCompletionRequest, CompletionRequest, _OpenAISampling
from hinge.server.reasoning import StreamingReasoning, split_reasoning, starts_in_reasoning
from hinge.server.tool_parsers import StreamingToolCalls, ToolCall, parse_tool_calls

router = APIRouter()


def _model_card(ctx: ServerContext, name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": ctx.created, "owned_by": "hinge",
            "root": ctx.model_root or ctx.model_name, "parent": None,
            "max_model_len": ctx.max_model_len}


@router.get("/v1/models")
async def models(request: Request) -> JSONResponse:
    """Every served name (``--served-model-name``), as vLLM lists them."""
    ctx = ctx_of(request)
    return JSONResponse({"object": "list", "data": [_model_card(ctx, n) for n in ctx.model_names]})


@router.get("/v1/models/{model_id:path}")
async def model(model_id: str, request: Request) -> JSONResponse:
    """One model card: any name a request's ``model`` may carry; 404 for others."""
    ctx = ctx_of(request)
    return JSONResponse(_model_card(ctx, ctx.check_model(model_id)))


@dataclass
class _Choice:
    index: int
    prompt_ids: list[int]
    handle: RequestHandle
    prompt_index: int = 0
    sent_text: str = ""
    sent_tokens: int = 0
    last: Any = None
    raw_text: str = ""  #: everything the engine let through so far (chat parsers read it)
    reasoning: StreamingReasoning | None = None
    tools: StreamingToolCalls | None = None
    num_calls: int = 0


def _finish_reason(choice: _Choice) -> str | None:
    if choice.handle.aborted:
        return "abort"
    out = choice.last
    return out.finish_reason if out is not None and out.finished else None


def _usage(choices: list[_Choice]) -> dict[str, Any]:
    firsts = {c.prompt_index: c for c in choices}.values()  # a prompt counts once, however many samples
    prompt = sum(len(c.prompt_ids) for c in firsts)
    cached = sum(getattr(c.last, "cached_tokens", 0) or 0 for c in firsts)
    completion = sum(len(c.last.token_ids) if c.last is not None else 0 for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def _check_body(body: _OpenAISampling) -> None:
    refused = body.unsupported()
    if refused is not None:
        raise APIError(400, refused)


async def _start(ctx: ServerContext, body: _OpenAISampling, prompts: list[list[int]],
                 max_new: int | None, logprobs: bool, top: int, samples: int | None = None,
                 **extra: Any) -> list[_Choice]:
    """Submit ``samples`` (default ``n``) requests per prompt; one choice each."""
    samples = samples or body.n
    jobs, owners = [], []
    for p, ids in enumerate(prompts):
        ctx.check_ids(ids)
        budget = max_new
        if budget is None:  # OpenAI: no limit means up to the context
            budget = (ctx.max_model_len - len(ids)) if ctx.max_model_len else 16
        check_fit(ctx, ids, budget)
        for j in range(samples):
            try:
                params = body.sampling_params(budget, logprobs, top, **extra)
            except ValueError as exc:
                raise APIError(400, str(exc)) from exc
            if body.seed is not None and j:
                params.seed = (body.seed + j) % 2**63
            jobs.append((ids, params, None))
            owners.append(p)
    handles = await submit_all(ctx, jobs)
    return [_Choice(i, ids, h, owners[i])
            for i, ((ids, _, _), h) in enumerate(zip(jobs, handles, strict=True))]


async def _finish_all(choices: list[_Choice]) -> None:
    lasts = await drain_all([c.handle for c in choices])
    for c, last in zip(choices, lasts, strict=True):
        c.last = last


def _stream(choices: list[_Choice], include_usage: bool, base: dict[str, Any],
            make_choice: Any, first_chunks: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    return sse_stream(_chunks(choices, include_usage, base, make_choice, first_chunks),
                      [c.handle for c in choices])


async def _chunks(choices: list[_Choice], include_usage: bool, base: dict[str, Any],
                  make_choice: Any, first_chunks: list[dict[str, Any]]
                  ) -> AsyncIterator[dict[str, Any]]:
    for chunk in first_chunks:
        yield {**base, "choices": [chunk]}
    async for index, out in merge([c.handle for c in choices]):
        choice = choices[index]
        if out is not None:
            choice.last = out
        payload = make_choice(choice, out)
        if payload is not None:
            yield {**base, "choices": [payload]}
    if include_usage:
        yield {**base, "choices": [], "usage": _usage(choices)}


def _new_part(choice: _Choice, out: Any, whole: bool = False
              ) -> tuple[str, list[int], list[Any], list[Any]]:
    """The text and tokens of ``out`` not yet sent (all of them if ``whole``), and their
    logprobs; advances the choice."""
    if out is None:
        return "", [], [], []
    delta = out.text if whole else stream_delta(choice.sent_text, out)
    choice.sent_text += delta
    start, choice.sent_tokens = choice.sent_tokens, len(out.token_ids)
    lps = list(getattr(out, "logprobs", None) or [])[start:]
    tops = list(getattr(out, "top_logprobs", None) or [])[start:]
    return delta, list(out.token_ids[start:]), lps, tops


# completions


def _completion_prompts(ctx: ServerContext, prompt: Any) -> tuple[list[list[int]], list[str | None]]:
    """Token ids of each prompt, and its text when it was sent as text."""
    if isinstance(prompt, str):
        return [ctx.encode(prompt)], [prompt]
    if not prompt:
        raise APIError(400, "prompt is empty; send a string, a list of strings or token ids")
    if isinstance(prompt[0], str):
        return [ctx.encode(p) for p in prompt], list(prompt)
    if isinstance(prompt[0], int):
        return [list(prompt)], [None]
    return [list(p) for p in prompt], [None] * len(prompt)


def _top_dict(ctx: ServerContext, row: list[tuple[int, float]], chosen: int | None,
              chosen_lp: float | None) -> dict[str, float]:
    """vLLM's per-position dict: the top tokens plus the chosen one."""
    out = {ctx.token_text(t): lp for t, lp in row}
    if chosen is not None and chosen_lp is not None:
        out.setdefault(ctx.token_text(chosen), chosen_lp)
    return out


def _completion_logprobs(ctx: ServerContext, ids: list[int], lps: list[Any], tops: list[Any],
                         offset: int, want_top: bool) -> dict[str, Any]:
    tokens = [ctx.token_text(t) for t in ids]
    offsets, pos = [], offset
    for tok in tokens:
        offsets.append(pos)
        pos += len(tok)
    top_rows = None
    if want_top:
        top_rows = [None if row is None else
                    _top_dict(ctx, row, tid, lp)
                    for tid, lp, row in zip(ids, lps, list(tops) + [[]] * (len(ids) - len(tops)),
                                            strict=False)]
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": top_rows,
            "text_offset": offsets}


def _echo_part(ctx: ServerContext, choice: _Choice, prompt_text: str | None
               ) -> tuple[str, list[int], list[Any], list[Any]]:
    """The prompt as echo shows it: text, ids, logprobs (first null) and top rows (first null)."""
    text = prompt_text if prompt_text is not None else ctx.tokenizer.decode(
        choice.prompt_ids, skip_special_tokens=False)
    out = choice.last
    lps = list(getattr(out, "prompt_logprobs", None) or [])
    tops = list(getattr(out, "prompt_top_logprobs", None) or [])
    n = len(choice.prompt_ids)
    return (text, list(choice.prompt_ids), ([None] + lps)[:n] if lps else [None] * n,
            ([None] + tops)[:n] if tops else [None] * n)


def _best(choices: list[_Choice], n: int, best_of: int) -> list[_Choice]:
    """Per prompt, the ``n`` of ``best_of`` samples with the highest mean token logprob."""
    kept = []
    for start in range(0, len(choices), best_of):
        group = choices[start:start + best_of]
        def score(c: _Choice) -> float:
            lps = list(getattr(c.last, "logprobs", None) or [])
            return sum(lps) / len(lps) if lps else float("-inf")
        kept += sorted(group, key=score, reverse=True)[:n]
    for i, choice in enumerate(kept):
        choice.index = i
    return kept


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request) -> Response:
    ctx = ctx_of(request)
    model_name = ctx.check_model(body.model)
    _check_body(body)
    best_of = body.best_of or body.n
    if best_of < body.n:
        raise APIError(400, f"best_of ({best_of}) must be at least n ({body.n})")
    if best_of > body.n and body.stream:
        raise APIError(400, "best_of > n cannot stream (the best samples are known only at the "
                            "end); send stream=false or best_of equal to n")
    logprobs = body.logprobs is not None
    prompts, texts = _completion_prompts(ctx, body.prompt)
    extra: dict[str, Any] = {}
    if body.echo and logprobs:
        extra = dict(prompt_logprobs_start=0, prompt_top_logprobs=body.logprobs or 0)
    choices = await _start(ctx, body, prompts, body.max_tokens, logprobs or best_of > body.n,
                           body.logprobs or 0, samples=best_of, **extra)
    base = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
            "created": int(time.time()), "model": model_name}
    want_top = bool(body.logprobs)

    def make_choice(choice: _Choice, out: Any, whole: bool = False) -> dict[str, Any]:
        echo = body.echo and choice.sent_tokens == 0 and out is not None
        prefix = _echo_part(ctx, choice, texts[choice.prompt_index]) if echo else None
        offset = len(choice.sent_text)
        delta, ids, lps, tops = _new_part(choice, out, whole)
        if prefix is not None:  # the prompt goes first, once
            choice.sent_text = prefix[0] + choice.sent_text
            delta = prefix[0] + delta
            ids, lps, tops = prefix[1] + ids, prefix[2] + lps, prefix[3] + tops
        return {"index": choice.index, "text": delta,
                "logprobs": _completion_logprobs(ctx, ids, lps, tops, offset, want_top)
                if logprobs else None,
                "finish_reason": _finish_reason(choice)}

    if body.stream:
        return StreamingResponse(_stream(choices, body.include_usage, base, make_choice, []),
                                 media_type="text/event-stream")
    await unless_disconnected(request, _finish_all(choices))
    usage = _usage(choices)
    if best_of > body.n:
        choices = _best(choices, body.n, best_of)
    items = [make_choice(c, c.last, whole=True) for c in choices]
    return JSONResponse({**base, "choices": items, "usage": usage})


# chat


def _chat_logprobs(ctx: ServerContext, ids: list[int], lps: list[Any], tops: list[Any]
                   ) -> dict[str, Any]:
    def entry(tid: int, lp: Any) -> dict[str, Any]:
        text = ctx.token_text(tid)
        return {"token": text, "logprob": lp, "bytes": list(text.encode())}

    content = []
    for i, (tid, lp) in enumerate(zip(ids, lps, strict=False)):
        row = tops[i] if i < len(tops) else []
        content.append({**entry(tid, lp), "top_logprobs": [entry(t, v) for t, v in row]})
    return {"content": content}


def _forced_calls(text: str, forced: str) -> list[ToolCall] | None:
    """The calls a grammar-forced reply holds (``required``: a JSON list; a named function: the
    arguments), or None when it does not parse (it stopped at the length limit)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if forced != "required":
        return [ToolCall(forced, json.dumps(value, ensure_ascii=False))]
    if not isinstance(value, list):
        return None
    return [ToolCall(c["name"], json.dumps(c.get("parameters", {}), ensure_ascii=False))
            for c in value if isinstance(c, dict) and isinstance(c.get("name"), str)]


def _chat_message(text: str, prompt: ChatPrompt, in_reasoning: bool, reasoning_on: bool,
                  parallel: bool = True) -> tuple[dict[str, Any], bool]:
    """The whole reply as an assistant message, and whether it holds tool calls."""
    reasoning = None
    if reasoning_on:
        reasoning, text = split_reasoning(text, in_reasoning)
    calls: list[ToolCall] | None = None
    if prompt.forced is not None:
        calls = _forced_calls(text, prompt.forced)
        if calls is not None:
            text = ""
    elif prompt.tool_parser is not None:
        text, calls = parse_tool_calls(text, prompt.tool_parser)
        calls = calls[:1] if calls and not parallel else calls
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [c.to_openai() for c in calls]
    return message, bool(calls)


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    ctx = ctx_of(request)
    model_name = ctx.check_model(body.model)
    _check_body(body)
    if body.top_logprobs and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs=true")
    prompt = build_chat_prompt(ctx, body)
    try:
        own = body.grammar()
    except ValueError as exc:
        raise APIError(400, str(exc)) from exc
    if prompt.grammar is not None and own is not None:
        raise APIError(400, "tool_choice required or a named function already constrains the "
                            "reply; leave out response_format (and regex/ebnf/json_schema)")
    # NOTE: a grammar constrains the reply from its first token: none of it is reasoning
    constrained = prompt.grammar is not None or own is not None
    reasoning_on = ctx.reasoning_parser is not None and body.separate_reasoning and not constrained
    in_reasoning = reasoning_on and starts_in_reasoning(prompt.text)
    parsing = reasoning_on or prompt.tool_parser is not None or prompt.forced is not None
    extra: dict[str, Any] = {"skip_special_tokens": False} if parsing else {}
    choices = await _start(ctx, body, [prompt.ids], body.max_new_tokens, body.logprobs,
                           body.top_logprobs or 0, grammar=prompt.grammar, **extra)
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model_name}

    def finish(choice: _Choice, has_calls: bool) -> str | None:
        reason = _finish_reason(choice)
        return "tool_calls" if has_calls and reason == "stop" else reason

    def make_message(choice: _Choice, out: Any) -> dict[str, Any]:
        _, ids, lps, tops = _new_part(choice, out, whole=True)
        message, has_calls = _chat_message(out.text if out is not None else "", prompt,
                                           in_reasoning, reasoning_on,
                                           body.parallel_tool_calls is not False)
        return {"index": choice.index, "message": message,
                "logprobs": _chat_logprobs(ctx, ids, lps, tops) if body.logprobs else None,
                "finish_reason": finish(choice, has_calls)}

    def make_delta(choice: _Choice, out: Any) -> dict[str, Any] | None:
        delta_text, ids, lps, tops = _new_part(choice, out)
        choice.raw_text += delta_text
        done = _finish_reason(choice) is not None
        delta: dict[str, Any] = {}
        content = delta_text
        if parsing:
            content = ""
            text = choice.raw_text
            if reasoning_on:
                choice.reasoning = choice.reasoning or StreamingReasoning(in_reasoning)
                r_delta, content = choice.reasoning.feed(text, done)
                if r_delta:
                    delta["reasoning_content"] = r_delta
                text = split_reasoning(text, in_reasoning)[1]
            if prompt.forced is not None:
                content = ""
                calls = _forced_calls(text, prompt.forced) if done else None
                if done and calls is None:
                    content = text
                new_calls = calls or []
            elif prompt.tool_parser is not None:
                choice.tools = choice.tools or StreamingToolCalls(prompt.tool_parser)
                content, new_calls = choice.tools.feed(text, done)
            else:
                new_calls = []
            if new_calls:
                delta["tool_calls"] = [{"index": choice.num_calls + i, **c.to_openai()}
                                       for i, c in enumerate(new_calls)]
                choice.num_calls += len(new_calls)
        if content:
            delta["content"] = content
        if not delta and not done and not ids:
            return None
        return {"index": choice.index, "delta": delta,
                "logprobs": _chat_logprobs(ctx, ids, lps, tops) if body.logprobs else None,
                "finish_reason": finish(choice, choice.num_calls > 0) if done else None}

    if body.stream:
        first = [{"index": c.index, "delta": {"role": "assistant", "content": ""},
                  "logprobs": None, "finish_reason": None} for c in choices]
        return StreamingResponse(_stream(choices, body.include_usage, base, make_delta, first),
                                 media_type="text/event-stream")
    await unless_disconnected(request, _finish_all(choices))
    items = [make_message(c, c.last) for c in choices]
    return JSONResponse({**base, "object": "chat.completion", "choices": items,
                         "usage": _usage(choices)})
