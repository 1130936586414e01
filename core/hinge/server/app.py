"""The FastAPI app and ``serve()``: socket first, then engine thread + uvicorn; graceful on
SIGTERM."""

from __future__ import annotations

import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from hinge.engine.async_engine import AsyncEngine
from hinge.server import info, native, openai, service
from hinge.server.batch_log import DEFAULT_DECODE_LOG_INTERVAL
from hinge.server.context import APIError, ClientDisconnected, ServerContext, error_body
from hinge.server.listen import bind_socket
from hinge.server.middleware import GuardMiddleware
from hinge.server.monitor import EngineMonitor
from hinge.server.reasoning import check_parser
from hinge.server.server_metrics import ServerMetrics
from hinge.server.tool_parsers import parser_name

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


def build_app(engine: AsyncEngine, *, model_name: str | Sequence[str],
              model_aliases: set[str] | None = None, model_root: str | None = None,
              api_key: str | None = None, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
              metrics: ServerMetrics | None = None, plugins_report: Callable[[], Any] | None = None,
              health_timeout_s: float = 30.0,
              decode_log_interval: int = DEFAULT_DECODE_LOG_INTERVAL,
              tool_call_parser: str | None = None,
              reasoning_parser: str | None = None) -> FastAPI:
    """An app around a (not yet started) AsyncEngine; the app's lifespan starts and stops it.

    ``model_name`` is the served name, or several (``/v1/models`` lists them all; the first is
    the primary one); a request's ``model`` may also be one of ``model_aliases``. The engine is
    wrapped in an ``EngineMonitor`` that feeds ``metrics`` and logs batch lines every
    ``decode_log_interval`` decode steps (0: none). ``tool_call_parser`` overrides the parser
    the chat template implies; ``reasoning_parser`` splits ``<think>`` replies.
    """
    assert not engine.alive, "build_app needs an AsyncEngine that has not started"
    names = [model_name] if isinstance(model_name, str) else list(model_name)
    if not names:
        raise ValueError("build_app needs at least one model name")
    metrics = metrics or ServerMetrics()
    monitor = engine.engine
    if not isinstance(monitor, EngineMonitor):
        monitor = engine.engine = EngineMonitor(engine.engine, metrics, decode_log_interval)
    ctx = ServerContext(engine, names, set(model_aliases or ()), metrics, plugins_report,
                        health_timeout_s, model_root=model_root, monitor=monitor,
                        tool_call_parser=parser_name(tool_call_parser) if tool_call_parser else None,
                        reasoning_parser=check_parser(reasoning_parser) if reasoning_parser else None)

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
    app.include_router(info.router)
    add_error_handlers(app)
    app.add_middleware(GuardMiddleware, api_key=api_key, max_request_bytes=max_request_bytes)
    return app


def add_error_handlers(app: FastAPI) -> None:
    """Every error body is ``{"error": {"message", "type", "code"}}``: the routes' own errors,
    validation (400), unknown routes (404), wrong methods (405) and unexpected faults (500)."""

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(error_body(exc.status, exc.message, exc.kind), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(error_body(400, _validation_message(exc), "invalid_request_error"),
                            status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        status, where = exc.status_code, f"{request.method} {request.url.path}"
        if status == 404:
            message = f"no route {where}; the routes are listed at /openapi.json"
            kind = "not_found_error"
        elif status == 405:
            allowed = _allowed_methods(request)
            headers = {**(exc.headers or {}), "Allow": allowed}
            message = f"method {request.method} is not allowed on {request.url.path}; use {allowed}"
            kind = "invalid_request_error"
        else:
            message, kind = f"{where}: {exc.detail}", "invalid_request_error"
        return JSONResponse(error_body(status, message, kind), status_code=status,
                            headers=headers if status == 405 else exc.headers)

    @app.exception_handler(ClientDisconnected)
    async def disconnected(request: Request, exc: ClientDisconnected) -> Response:
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # NOTE: Starlette re-raises after this answer, so uvicorn logs the traceback once
        message = f"internal server error: {type(exc).__name__}: {exc}; see the server log"
        return JSONResponse(error_body(500, message, "internal_error"), status_code=500)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(request: Request) -> str:
    """The methods some route answers on this path (Starlette's Allow names only the first
    route's, and /flush_cache has one route per method)."""
    routes = request.app.router.routes
    allowed = [m for m in _METHODS
               if any(r.matches({**request.scope, "method": m})[0] is Match.FULL for r in routes)]
    return ", ".join(allowed)


def _version() -> str:
    import hinge

    return hinge.__version__


def _plugins_report(config: Any) -> Callable[[], Any]:
    def report() -> Any:
        from hinge.plugins_cli import plugin_listing

        return plugin_listing(config)

    return report


def model_names(config: Any, served_model_names: Sequence[str] | None = None
                ) -> tuple[list[str], set[str]]:
    """The names ``/v1/models`` lists and the further names a request's ``model`` may carry.

    Without ``served_model_names`` the model is listed as its path (``"default"`` for the
    embedded model) and also answers to its folder name; ``"default"`` always names it.
    """
    path = str(config.model) if getattr(config, "model", None) else "default"
    if served_model_names:
        return list(dict.fromkeys(served_model_names)), {"default"}
    return [path], {os.path.basename(os.path.normpath(path)), "default"}


def serve(config: Any, host: str = "127.0.0.1", port: int = 30000, api_key: str | None = None,
          max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, graceful_timeout_s: float = 30.0,
          log_level: str = "info", served_model_names: Sequence[str] | None = None,
          decode_log_interval: int = DEFAULT_DECODE_LOG_INTERVAL,
          sock: socket.socket | None = None, tool_call_parser: str | None = None,
          reasoning_parser: str | None = None) -> None:
    """Listen on ``host:port`` (or the bound ``sock``), then build the engine from ``config`` and
    serve it until SIGTERM/SIGINT; returns normally.

    The socket is bound before the model loads, so a bad or busy address raises ``ListenError``
    (a ``ValueError``) at once and nothing can take the port while the weights load.
    """
    if decode_log_interval < 0:
        raise ValueError(f"--decode-log-interval must be >= 0 (0 turns decode lines off), got "
                         f"{decode_log_interval}")
    if tool_call_parser:
        parser_name(tool_call_parser)  # ValueError before anything loads
    if reasoning_parser:
        check_parser(reasoning_parser)
    sock = sock if sock is not None else bind_socket(host, port)
    try:
        server = _build_server(config, host, sock.getsockname()[1], api_key, max_request_bytes,
                               graceful_timeout_s, log_level, served_model_names,
                               decode_log_interval, tool_call_parser, reasoning_parser)
    except BaseException:
        sock.close()
        raise
    # NOTE: uvicorn re-raises the captured signal after its graceful shutdown, which would end
    # the process with -SIGTERM; swallowing that re-raise makes a clean shutdown exit 0.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    if not server.started:
        raise RuntimeError(f"the server did not start on {host}:{port}; see the log above")


class _BoundServer(uvicorn.Server):
    """uvicorn on a socket bound beforehand; it logs where it listens once it accepts (uvicorn
    itself says so only for sockets it binds)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.should_exit or not sockets:
            return
        host, port = self.config.host, sockets[0].getsockname()[1]
        where = f"[{host}]" if ":" in host else host
        logging.getLogger("uvicorn.error").info(
            "Uvicorn running on http://%s:%d (Press CTRL+C to quit)", where, port)


def _build_server(config: Any, host: str, port: int, api_key: str | None, max_request_bytes: int,
                  graceful_timeout_s: float, log_level: str,
                  served_model_names: Sequence[str] | None, decode_log_interval: int,
                  tool_call_parser: str | None = None, reasoning_parser: str | None = None) -> Any:
    from hinge.engine.engine import Engine

    engine = Engine(config)
    names, aliases = model_names(config, served_model_names)
    metrics = ServerMetrics()
    app = build_app(AsyncEngine(engine), model_name=names, model_aliases=aliases,
                    model_root=str(engine.config.model), api_key=api_key,
                    max_request_bytes=max_request_bytes, metrics=metrics,
                    plugins_report=_plugins_report(config), decode_log_interval=decode_log_interval,
                    tool_call_parser=tool_call_parser, reasoning_parser=reasoning_parser)
    return _BoundServer(uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="on",
        timeout_graceful_shutdown=graceful_timeout_s))
