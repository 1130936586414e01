"""The FastAPI app and ``serve()``: engine thread + uvicorn, graceful on SIGTERM."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response

from hinge.engine.async_engine import AsyncEngine
from hinge.server import native, openai, service
from hinge.server.context import APIError, ClientDisconnected, ServerContext, error_body
from hinge.server.middleware import GuardMiddleware
from hinge.server.server_metrics import ServerMetrics

logger = logging.getLogger("hinge.server")

DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024


def _validation_message(exc: RequestValidationError) -> str:
    errors = list(exc.errors())
    for err in errors:
        if err.get("type") == "json_invalid":
            return f"malformed JSON body: {err.get('ctx', {}).get('error', err.get('msg'))}"
    # NOTE: a union field reports every branch; the deepest error per field is the useful one.
    locs = [[str(x) for x in err.get("loc", ()) if x != "body"] for err in errors]
    deepest: dict[str, int] = {}
    for loc in locs:
        key = loc[0] if loc else ""
        deepest[key] = max(deepest.get(key, 0), len(loc))
    parts = [f"{'.'.join(loc) or 'body'}: {err.get('msg')}" for loc, err in zip(locs, errors, strict=True)
             if len(loc) == deepest[loc[0] if loc else ""]]
    return "invalid request: " + "; ".join(parts[:8])


def build_app(engine: AsyncEngine, *, model_name: str, model_aliases: set[str] | None = None,
              api_key: str | None = None, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
              metrics: ServerMetrics | None = None, plugins_report: Callable[[], Any] | None = None,
              health_timeout_s: float = 30.0) -> FastAPI:
    """An app around a (not yet started) AsyncEngine; the app's lifespan starts and stops it."""
    ctx = ServerContext(engine, model_name, set(model_aliases or ()),
                        metrics or ServerMetrics(), plugins_report, health_timeout_s)
    if engine.observer is None:
        engine.observer = ctx.metrics

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not engine.alive:
            engine.start()
        try:
            yield
        finally:
            logger.info("shutting down: aborting %d in-flight request(s)", engine.num_active)
            engine.stop()

    app = FastAPI(title="hinge", version=_version(), lifespan=lifespan)
    app.state.ctx = ctx
    app.include_router(native.router)
    app.include_router(openai.router)
    app.include_router(service.router)

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(error_body(exc.status, exc.message, exc.kind), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(400, _validation_message(exc), "invalid_request_error"),
                            status_code=400)

    @app.exception_handler(ClientDisconnected)
    async def disconnected(request: Request, exc: ClientDisconnected) -> Response:
        return Response(status_code=499)

    app.add_middleware(GuardMiddleware, api_key=api_key, max_request_bytes=max_request_bytes)
    return app


def _version() -> str:
    import hinge

    return hinge.__version__


def _plugins_report(config: Any) -> Callable[[], Any]:
    def report() -> Any:
        from hinge.plugins_cli import plugin_listing

        return plugin_listing(config)

    return report


def serve(config: Any, host: str = "127.0.0.1", port: int = 30000, api_key: str | None = None,
          max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, graceful_timeout_s: float = 30.0,
          log_level: str = "info") -> None:
    """Build the engine from ``config`` and serve it until SIGTERM/SIGINT; returns normally."""
    import uvicorn

    from hinge.engine.engine import Engine

    engine = Engine(config)
    name = str(config.model) if getattr(config, "model", None) else "default"
    aliases = {os.path.basename(os.path.normpath(name)), "default"}
    metrics = ServerMetrics()
    app = build_app(AsyncEngine(engine, metrics), model_name=name, model_aliases=aliases,
                    api_key=api_key, max_request_bytes=max_request_bytes, metrics=metrics,
                    plugins_report=_plugins_report(config))
    server = uvicorn.Server(uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="on",
        timeout_graceful_shutdown=graceful_timeout_s))
    # NOTE: uvicorn re-raises the captured signal after its graceful shutdown, which would end
    # the process with -SIGTERM; swallowing that re-raise makes a clean shutdown exit 0.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not server.started:
        raise RuntimeError(f"the server did not start on {host}:{port}; see the log above")
