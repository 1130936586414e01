"""Service routes: health, /version, /server_info, /v1/plugins, /flush_cache, /abort_request,
/metrics."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from hinge.engine.async_engine import EngineError
from hinge.sampling_params import SamplingParams
from hinge.server.context import APIError, ServerContext, drain, error_body
from hinge.server.native import ctx_of, jsonable
from hinge.server.protocol import AbortRequest
from hinge.server.server_metrics import stats_dict

router = APIRouter()


@router.get("/health")
async def health() -> Response:
    return Response(status_code=200)


@router.get("/health_generate")
async def health_generate(request: Request) -> Response:
    ctx = ctx_of(request)
    params = SamplingParams(max_new_tokens=1, temperature=0.0, ignore_eos=True)
    try:
        handle = await asyncio.wait_for(ctx.engine.submit([0], params), ctx.health_timeout_s)
        out = await asyncio.wait_for(drain(handle), ctx.health_timeout_s)
        if out is None or not out.token_ids:
            raise EngineError("the probe request produced no token")
    except (TimeoutError, EngineError, APIError, ValueError) as exc:
        message = f"engine cannot generate: {exc or 'no token within the timeout'}"
        if ctx.engine.last_error:
            message += f"; last engine error: {ctx.engine.last_error}"
        return JSONResponse(error_body(503, message, "unavailable"), status_code=503)
    return Response(status_code=200)


async def engine_stats(ctx: ServerContext) -> dict[str, Any]:
    try:
        timeout = min(5.0, ctx.health_timeout_s)  # a stuck step must not stall /metrics
        stats = await ctx.engine.call(ctx.engine.engine.stats, timeout=timeout)
        ctx.engine.last_stats = stats
    except (TimeoutError, EngineError):
        stats = ctx.engine.last_stats
    return stats_dict(stats)


@router.get("/server_info")
@router.get("/get_server_info")
async def server_info(request: Request) -> JSONResponse:
    """Resolved config, plan and stats; ``internal_states`` and ``version`` as sglang's
    clients read them (``bench_serving`` reads ``internal_states[0].avg_spec_accept_length``)."""
    ctx = ctx_of(request)
    try:
        info = await ctx.engine.call(ctx.engine.engine.server_info,
                                     timeout=min(5.0, ctx.health_timeout_s))
    except (TimeoutError, EngineError) as exc:
        info = {"unavailable": str(exc) or "engine busy"}
    info = dict(info or {})
    info["stats"] = await engine_stats(ctx)
    info["server"] = {"model_name": ctx.model_name, "served_model_names": ctx.model_names,
                      "active_requests": ctx.engine.num_active,
                      "wedged": ctx.engine.is_wedged(ctx.health_timeout_s),
                      "last_error": ctx.engine.last_error}
    import hinge

    info["version"] = hinge.__version__
    info["internal_states"] = [{"avg_spec_accept_length": 0.0,
                                "last_gen_throughput": 0.0}]
    return JSONResponse(jsonable(info))


@router.get("/v1/plugins")
async def plugins(request: Request) -> JSONResponse:
    ctx = ctx_of(request)
    if ctx.plugins_report is None:
        raise APIError(404, "no plugin report is available in this server")
    return JSONResponse(jsonable(ctx.plugins_report()))


@router.get("/version")
async def version() -> JSONResponse:
    """``{"version": ...}``, as sglang answers it."""
    import hinge

    return JSONResponse({"version": hinge.__version__})


@router.get("/flush_cache")
@router.post("/flush_cache")
async def flush_cache(request: Request) -> JSONResponse:
    """Empty the prefix cache (GET or POST, as sglang); 400 while requests run or wait."""
    ctx = ctx_of(request)
    ok = await ctx.engine.call(ctx.engine.engine.flush_cache, timeout=30.0)
    if not ok:
        raise APIError(400, "cannot flush the cache while requests are running or waiting; "
                            "retry when the server is idle")
    return JSONResponse({"success": True, "message": "Cache flushed."})


@router.post("/abort_request")
async def abort_request(body: AbortRequest, request: Request) -> JSONResponse:
    found = await ctx_of(request).engine.abort(body.rid)
    return JSONResponse({"rid": body.rid, "aborted": found})


@router.get("/metrics")
async def metrics(request: Request) -> PlainTextResponse:
    ctx = ctx_of(request)
    wedged = ctx.engine.is_wedged(ctx.health_timeout_s)
    text = ctx.metrics.render(await engine_stats(ctx), wedged)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4")
