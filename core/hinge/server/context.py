"""What every route shares: the engine handle, the tokenizer, errors, prompts and disconnects."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import Request

from hinge.engine.async_engine import AsyncEngine, EngineError, RequestHandle
from hinge.server.server_metrics import ServerMetrics

T = TypeVar("T")


class APIError(Exception):
    """An error answered as ``{"error": {"message", "type", "code"}}`` with ``status``."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


class ClientDisconnected(Exception):
    pass


@dataclass
class ServerContext:
    engine: AsyncEngine
    #: the names ``/v1/models`` lists (``--served-model-name``); the first is the primary one
    model_names: list[str]
    #: further names a request's ``model`` may carry (the checkpoint's folder name, "default")
    model_aliases: set[str] = field(default_factory=set)
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
    plugins_report: Any = None  #: callable returning what `hinge plugins --json` prints
    health_timeout_s: float = 30.0
    model_root: str | None = None  #: the checkpoint the names stand for (``root`` in model cards)
    monitor: Any = None  #: the EngineMonitor wrapping the engine: told when requests arrive
    created: int = field(default_factory=lambda: int(time.time()))
    tool_call_parser: str | None = None  #: ``--tool-call-parser``; None: from the chat template
    reasoning_parser: str | None = None  #: ``--reasoning-parser``; None: no reasoning split

    @property
    def model_name(self) -> str:
        return self.model_names[0]

    @property
    def tokenizer(self) -> Any:
        return self.engine.engine.tokenizer

    @property
    def max_model_len(self) -> int | None:
        return getattr(self.engine.engine, "max_model_len", None)

    @property
    def vocab_size(self) -> int | None:
        eng = self.engine.engine
        for owner in (eng, getattr(eng, "model_config", None), getattr(eng, "tokenizer", None)):
            size = getattr(owner, "vocab_size", None)
            if isinstance(size, int):
                return size
        return None

    def serves(self, name: str) -> bool:
        """Whether a request may name the model ``name``."""
        return name in self.model_names or name in self.model_aliases

    def check_model(self, name: str | None) -> str:
        """The model name a response carries (the request's, as vLLM echoes it, or the primary
        name); 404 for a name this server does not serve."""
        if name is None:
            return self.model_name
        if self.serves(name):
            return name
        raise APIError(404, f"unknown model {name!r}; this server serves "
                            f"{', '.join(repr(n) for n in self.model_names)} (see GET /v1/models)",
                       "model_not_found")

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def check_ids(self, ids: list[int], what: str = "prompt") -> list[int]:
        if not ids:
            raise APIError(400, f"{what} is empty; send at least one token")
        vocab = self.vocab_size
        if vocab is not None:
            bad = [t for t in ids if not 0 <= t < vocab]
            if bad:
                raise APIError(400, f"{what} has token ids outside the vocabulary [0, {vocab}): "
                                    f"{bad[:5]}")
        limit = self.max_model_len
        if limit is not None and len(ids) >= limit:
            raise APIError(400, f"{what} has {len(ids)} tokens; the context is {limit} tokens and "
                                "at least one must be left to generate; shorten the prompt")
        return ids

    def token_text(self, token_id: int) -> str:
        """A token's text for logprobs; special tokens keep theirs (``<|im_end|>``, not "")."""
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    async def submit(self, prompt_ids: list[int], params: Any, rid: str | None) -> RequestHandle:
        """Add a request; its arrival (now) is what queue time, TTFT and latency count from."""
        rid = rid or uuid.uuid4().hex
        arrival = time.perf_counter()
        if self.monitor is not None:
            self.monitor.expect(rid, arrival)
        try:
            return await self.engine.submit(prompt_ids, params, rid)
        except BaseException as exc:
            if self.monitor is not None:
                self.monitor.unexpect(rid, arrival)
            if isinstance(exc, ValueError):
                raise APIError(400, str(exc)) from exc
            if isinstance(exc, EngineError):
                raise APIError(500, str(exc), "internal_error") from exc
            raise


def sse(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def error_body(status: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": status}}


async def until_disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work`` but cancel it (aborting its requests) if the client goes away first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(until_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        raise ClientDisconnected()
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()


async def drain(handle: RequestHandle) -> Any:
    """Run a request to the end and return its last output (None if aborted before any)."""
    last = None
    try:
        async for out in handle:
            last = out
    except EngineError as exc:
        raise APIError(500, str(exc), "internal_error") from exc
    finally:
        handle.abort()
    return last


async def drain_all(handles: list[RequestHandle]) -> list[Any]:
    """Run requests to the end together and return their last outputs; every request is aborted
    when any fails or the wait is cancelled."""
    try:
        return await asyncio.gather(*(drain(h) for h in handles))
    finally:
        for handle in handles:
            handle.abort()


async def sse_stream(payloads: AsyncGenerator[Any, None], handles: list[RequestHandle]
                     ) -> AsyncIterator[bytes]:
    """``payloads`` as server-sent events, then ``[DONE]``; an engine fault becomes an error
    event, and every request is aborted however the stream ends."""
    try:
        async for payload in payloads:
            yield sse(payload)
    except EngineError as exc:
        yield sse(error_body(500, str(exc), "internal_error"))
    finally:
        for handle in handles:
            handle.abort()
        await payloads.aclose()
    yield SSE_DONE
