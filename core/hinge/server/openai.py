"""OpenAI-compatible routes: /v1/models[/{id}], /v1/completions, /v1/chat/completions."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from hinge.engine.async_engine import RequestHandle
from hinge.server.context import (
    APIError,
    ServerContext,
    drain_all,
    sse_stream,
    unless_disconnected,
)
from hinge.server.native import check_fit, ctx_of, merge, stream_delta, submit_all
from hinge.server.protocol import ChatCompletionRequest, CompletionRequest, _OpenAISampling

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
    sent_text: str = ""
    sent_tokens: int = 0
    last: Any = None


def _finish_reason(choice: _Choice) -> str | None:
    if choice.handle.aborted:
        return "abort"
    out = choice.last
    return out.finish_reason if out is not None and out.finished else None


def _usage(choices: list[_Choice], n: int) -> dict[str, Any]:
    firsts = choices[::n]  # one choice per prompt: the prompt is counted once
    prompt = sum(len(c.prompt_ids) for c in firsts)
    cached = sum(getattr(c.last, "cached_tokens", 0) or 0 for c in firsts)
    completion = sum(len(c.last.token_ids) if c.last is not None else 0 for c in choices)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


async def _start(ctx: ServerContext, body: _OpenAISampling, prompts: list[list[int]],
                 max_new: int | None, logprobs: bool, top: int) -> list[_Choice]:
    jobs = []
    for ids in prompts:
        ctx.check_ids(ids)
        budget = max_new
        if budget is None:  # OpenAI: no limit means up to the context
            budget = (ctx.max_model_len - len(ids)) if ctx.max_model_len else 16
        check_fit(ctx, ids, budget)
        for j in range(body.n):
            try:
                params = body.sampling_params(budget, logprobs, top)
            except ValueError as exc:
                raise APIError(400, str(exc)) from exc
            if body.seed is not None and j:
                params.seed = (body.seed + j) % 2**63
            jobs.append((ids, params, None))
    handles = await submit_all(ctx, jobs)
    return [_Choice(i, ids, h) for i, ((ids, _, _), h) in enumerate(zip(jobs, handles, strict=True))]


async def _finish_all(choices: list[_Choice]) -> None:
    lasts = await drain_all([c.handle for c in choices])
    for c, last in zip(choices, lasts, strict=True):
        c.last = last


def _stream(choices: list[_Choice], include_usage: bool, n: int, base: dict[str, Any],
            make_choice: Any, first_chunks: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    return sse_stream(_chunks(choices, include_usage, n, base, make_choice, first_chunks),
                      [c.handle for c in choices])


async def _chunks(choices: list[_Choice], include_usage: bool, n: int, base: dict[str, Any],
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
        yield {**base, "choices": [], "usage": _usage(choices, n)}


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


def _completion_prompts(ctx: ServerContext, prompt: Any) -> list[list[int]]:
    if isinstance(prompt, str):
        return [ctx.encode(prompt)]
    if not prompt:
        raise APIError(400, "prompt is empty; send a string, a list of strings or token ids")
    if isinstance(prompt[0], str):
        return [ctx.encode(p) for p in prompt]
    if isinstance(prompt[0], int):
        return [list(prompt)]
    return [list(p) for p in prompt]


def _completion_logprobs(ctx: ServerContext, ids: list[int], lps: list[Any], tops: list[Any],
                         offset: int) -> dict[str, Any]:
    tokens = [ctx.token_text(t) for t in ids]
    offsets, pos = [], offset
    for tok in tokens:
        offsets.append(pos)
        pos += len(tok)
    return {"tokens": tokens, "token_logprobs": lps,
            "top_logprobs": [{ctx.token_text(t): lp for t, lp in row} for row in tops] or None,
            "text_offset": offsets}


@router.post("/v1/completions")
async def completions(body: CompletionRequest, request: Request) -> Response:
    ctx = ctx_of(request)
    model_name = ctx.check_model(body.model)
    if body.echo:
        raise APIError(400, "echo=true is not supported; send echo=false")
    if body.suffix:
        raise APIError(400, "suffix is not supported; leave it out")
    logprobs = body.logprobs is not None
    choices = await _start(ctx, body, _completion_prompts(ctx, body.prompt), body.max_tokens,
                           logprobs, body.logprobs or 0)
    base = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
            "created": int(time.time()), "model": model_name}

    def make_choice(choice: _Choice, out: Any, whole: bool = False) -> dict[str, Any]:
        offset = len(choice.sent_text)
        delta, ids, lps, tops = _new_part(choice, out, whole)
        return {"index": choice.index, "text": delta,
                "logprobs": _completion_logprobs(ctx, ids, lps, tops, offset) if logprobs else None,
                "finish_reason": _finish_reason(choice)}

    if body.stream:
        return StreamingResponse(_stream(choices, body.include_usage, body.n, base, make_choice, []),
                                 media_type="text/event-stream")
    await unless_disconnected(request, _finish_all(choices))
    items = [make_choice(c, c.last, whole=True) for c in choices]
    return JSONResponse({**base, "choices": items, "usage": _usage(choices, body.n)})


# chat


def _chat_prompt(ctx: ServerContext, body: ChatCompletionRequest) -> list[int]:
    messages = [m.as_template_dict() for m in body.messages]
    try:
        rendered = ctx.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - a template that rejects the messages is a 400
        raise APIError(400, f"the chat template rejected the messages: {exc}") from exc
    if isinstance(rendered, str):
        return ctx.encode(rendered)
    return list(rendered)


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


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
    ctx = ctx_of(request)
    model_name = ctx.check_model(body.model)
    if body.top_logprobs and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs=true")
    prompt = _chat_prompt(ctx, body)
    choices = await _start(ctx, body, [prompt], body.max_new_tokens, body.logprobs,
                           body.top_logprobs or 0)
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model_name}

    def make_choice(choice: _Choice, out: Any, key: str = "delta") -> dict[str, Any]:
        delta, ids, lps, tops = _new_part(choice, out, whole=key == "message")
        message: dict[str, Any] = {"content": delta}
        if key == "message":
            message["role"] = "assistant"
        return {"index": choice.index, key: message,
                "logprobs": _chat_logprobs(ctx, ids, lps, tops) if body.logprobs else None,
                "finish_reason": _finish_reason(choice)}

    if body.stream:
        first = [{"index": c.index, "delta": {"role": "assistant", "content": ""},
                  "logprobs": None, "finish_reason": None} for c in choices]
        return StreamingResponse(_stream(choices, body.include_usage, body.n, base, make_choice,
                                         first), media_type="text/event-stream")
    await unless_disconnected(request, _finish_all(choices))
    items = [make_choice(c, c.last, "message") for c in choices]
    return JSONResponse({**base, "object": "chat.completion", "choices": items,
                         "usage": _usage(choices, body.n)})
