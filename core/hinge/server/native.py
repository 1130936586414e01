"""sglang-native /generate: one prompt or a batch, plain or streamed (SSE), with logprobs."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from hinge.engine.async_engine import RequestHandle
from hinge.sampling_params import SamplingParams
from hinge.server.context import (
    APIError,
    ServerContext,
    drain_all,
    sse_stream,
    unless_disconnected,
)
from hinge.server.native_protocol import GenerateRequest, native_sampling_params

router = APIRouter()


def ctx_of(request: Request) -> ServerContext:
    return request.app.state.ctx


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


# /generate


def _as_batch(req: GenerateRequest, ctx: ServerContext) -> tuple[list[list[int]], bool]:
    if req.text is not None:
        texts = req.text if isinstance(req.text, list) else [req.text]
        return [ctx.encode(t) for t in texts], isinstance(req.text, list)
    ids = req.input_ids or []
    if ids and isinstance(ids[0], list):
        return [list(x) for x in ids], True
    return [list(ids)], False


def _per_prompt(value: Any, n: int, name: str) -> list[Any]:
    if not isinstance(value, list):
        return [value] * n
    if len(value) != n:
        raise APIError(400, f"`{name}` has {len(value)} entries but the batch has {n} prompts")
    return value


def _params(sp: Any, req: GenerateRequest, prompt_len: int) -> SamplingParams:
    try:
        return native_sampling_params(sp, req, prompt_len)
    except ValueError as exc:
        raise APIError(400, f"sampling_params: {exc}") from exc


def _expand(req: GenerateRequest, prompts: list[list[int]], is_batch: bool
            ) -> tuple[list[tuple[list[int], SamplingParams, str | None]], list[int], bool]:
    """sglang's batch x n: one job per prompt and sample (``n`` per prompt), the prompt index of
    each, and whether the answer is a list (a batch, or one prompt with ``n`` > 1)."""
    sps = _per_prompt(req.sampling_params, len(prompts), "sampling_params")
    ns = {(sp.n if sp is not None and sp.n else 1) for sp in sps}
    if len(ns) > 1:
        raise APIError(400, f"sampling_params.n must be the same for every prompt, got {sorted(ns)}")
    n = ns.pop()
    total = len(prompts) * n
    if isinstance(req.rid, list):
        if len(req.rid) != total:
            raise APIError(400, f"`rid` has {len(req.rid)} entries but the batch has {total} "
                                "requests (prompts x n)")
        rids: list[str | None] = list(req.rid)
    elif req.rid is not None and total > 1:
        rids = [f"{req.rid}_{i}" for i in range(total)]  # sglang: rid_i on a batch
    else:
        rids = [req.rid] * total
    if len(set(r for r in rids if r is not None)) < len([r for r in rids if r is not None]):
        raise APIError(400, "`rid` values must be unique")
    jobs, owners = [], []
    for i, (ids, sp) in enumerate(zip(prompts, sps, strict=True)):
        params = _params(sp, req, len(ids))
        for j in range(n):
            job_params = params
            if j and params.seed is not None:
                job_params = _with_seed(params, (params.seed + j) % 2**63)
            jobs.append((ids, job_params, rids[i * n + j]))
            owners.append(i)
    return jobs, owners, is_batch or n > 1


def _with_seed(params: SamplingParams, seed: int) -> SamplingParams:
    from dataclasses import replace

    return replace(params, seed=seed)


def check_fit(ctx: ServerContext, ids: list[int], max_new_tokens: int) -> None:
    limit = ctx.max_model_len
    if limit is not None and len(ids) + max_new_tokens > limit:
        raise APIError(400, f"prompt ({len(ids)} tokens) + max_new_tokens ({max_new_tokens}) "
                            f"exceeds the context of {limit} tokens; lower max_new_tokens to at "
                            f"most {limit - len(ids)}")


async def submit_all(ctx: ServerContext, jobs: list[tuple[list[int], SamplingParams, str | None]]
                     ) -> list[RequestHandle]:
    """Validate every prompt, then add every request; on any failure abort the ones added."""
    for ids, params, _ in jobs:
        ctx.check_ids(ids)
        check_fit(ctx, ids, params.max_new_tokens)
    handles: list[RequestHandle] = []
    try:
        for ids, params, rid in jobs:
            handles.append(await ctx.submit(ids, params, rid))  # ValueError (GrammarError): 400
    except BaseException:
        for handle in handles:
            handle.abort()
        raise
    return handles


def _logprob_triples(ctx: ServerContext, ids: list[int], lps: list[Any] | None,
                     with_text: bool) -> list[list[Any]]:
    lps = list(lps or [])
    if len(lps) == len(ids) - 1:
        lps = [None] + lps  # entry 0 of sglang's input logprobs is always null
    return [[lp, tid, ctx.token_text(tid) if with_text else None] for lp, tid in zip(lps, ids, strict=False)]


def _top_triples(ctx: ServerContext, rows: list[Any] | None, with_text: bool) -> list[Any]:
    return [None if row is None else
            [[lp, tid, ctx.token_text(tid) if with_text else None] for tid, lp in row]
            for row in rows or []]


def stream_delta(sent: str, out: Any) -> str:
    """Text of ``out`` a client may see now, beyond ``sent`` (the engine holds back text that
    could become a stop string in ``new_text``)."""
    new_text = getattr(out, "new_text", None)
    if new_text is not None:
        return new_text
    return out.text[len(sent):] if out.text.startswith(sent) else ""


def native_item(ctx: ServerContext, req: GenerateRequest, handle: RequestHandle,
                prompt_ids: list[int], out: Any, t0: float, text: str | None = None
                ) -> dict[str, Any]:
    token_ids = list(out.token_ids) if out is not None else []
    reason = "abort" if handle.aborted else (out.finish_reason if out is not None else None)
    finish = None
    if reason is not None:
        finish = {"type": reason, "matched": getattr(out, "matched_stop", None)}
        if reason == "length":
            finish["length"] = len(token_ids)
    verify = getattr(out, "spec_verify_ct", 0) or 0
    meta: dict[str, Any] = {
        "id": handle.rid, "finish_reason": finish, "prompt_tokens": len(prompt_ids),
        "completion_tokens": len(token_ids),
        "cached_tokens": getattr(out, "cached_tokens", 0) or 0,
        "e2e_latency": time.perf_counter() - t0, "spec_verify_ct": verify,
        "spec_accept_length": len(token_ids) / verify if verify else 0.0,
    }
    if req.wants_logprobs:
        with_text = bool(req.return_text_in_logprobs)
        start = req.start_len if req.start_len >= 0 else len(prompt_ids) - 1
        prompt_lps = getattr(out, "prompt_logprobs", None) if out is not None else None
        meta["input_token_logprobs"] = _logprob_triples(
            ctx, prompt_ids[start:], [None] + list(prompt_lps or []), with_text)
        meta["output_token_logprobs"] = _logprob_triples(
            ctx, token_ids, getattr(out, "logprobs", None), with_text)
        if req.top_num > 0:
            prompt_tops = getattr(out, "prompt_top_logprobs", None) if out is not None else None
            meta["input_top_logprobs"] = _top_triples(
                ctx, [None] + list(prompt_tops or [])[:len(prompt_ids) - start - 1], with_text)
            meta["output_top_logprobs"] = _top_triples(
                ctx, getattr(out, "top_logprobs", None), with_text)
    if text is None:
        text = out.text if out is not None else ""
    return {"text": text, "output_ids": token_ids,
            "meta_info": meta}


@router.post("/generate")
@router.put("/generate")
async def generate(req: GenerateRequest, request: Request) -> Response:
    """sglang's ``/generate`` (POST or PUT): every field of ``GenerateReqInput`` its clients send."""
    ctx = ctx_of(request)
    prompts, is_batch = _as_batch(req, ctx)
    if is_batch and not prompts:
        raise APIError(400, "the batch is empty; send at least one prompt")
    jobs, _, is_batch = _expand(req, prompts, is_batch)
    job_prompts = [ids for ids, _, _ in jobs]
    t0 = time.perf_counter()
    handles = await submit_all(ctx, jobs)
    if req.stream:
        return StreamingResponse(
            sse_stream(_native_items(ctx, req, handles, job_prompts, t0, is_batch), handles),
            media_type="text/event-stream")

    async def run_all() -> list[dict[str, Any]]:
        outs = await drain_all(handles)
        return [native_item(ctx, req, h, ids, out, t0)
                for h, ids, out in zip(handles, job_prompts, outs, strict=True)]

    items = await unless_disconnected(request, run_all())
    return JSONResponse(items if is_batch else items[0])


async def _native_items(ctx: ServerContext, req: GenerateRequest, handles: list[RequestHandle],
                        prompts: list[list[int]], t0: float, is_batch: bool
                        ) -> AsyncIterator[dict[str, Any]]:
    sent = [""] * len(handles)
    async for index, out in merge(handles):
        if out is not None and not handles[index].aborted:
            sent[index] += stream_delta(sent[index], out)
        item = native_item(ctx, req, handles[index], prompts[index], out, t0, sent[index])
        if is_batch:
            item["index"] = index
        yield item


async def merge(handles: list[RequestHandle]) -> AsyncIterator[tuple[int, Any]]:
    """Interleave outputs of several requests as they arrive; an aborted request yields None last."""
    if len(handles) == 1:
        last = None
        async for out in handles[0]:
            last = out
            yield 0, out
        if handles[0].aborted:
            yield 0, last
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, handle: RequestHandle) -> None:
        last = None
        try:
            async for out in handle:
                last = out
                await queue.put((index, out, None))
            if handle.aborted:
                await queue.put((index, last, None))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
            await queue.put((index, None, exc))
        await queue.put((index, None, StopAsyncIteration()))

    tasks = [asyncio.ensure_future(pump(i, h)) for i, h in enumerate(handles)]
    try:
        remaining = len(handles)
        while remaining:
            index, out, exc = await queue.get()
            if isinstance(exc, StopAsyncIteration):
                remaining -= 1
            elif exc is not None:
                raise exc
            else:
                yield index, out
    finally:
        for task in tasks:
            task.cancel()
