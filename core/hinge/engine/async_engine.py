"""Run an ``Engine`` in its own thread and stream its outputs to asyncio callers.

The engine is not thread safe, so every call into it (add, abort, step, stats, flush) runs on the
engine thread; the event loop hands it closures through a queue and awaits their futures. Each
request owns an ``asyncio.Queue`` on the loop that submitted it, fed with ``call_soon_threadsafe``.

A step that raises is an internal fault: every request in the engine gets ``EngineError`` (the
server answers 500), is aborted so its pages return, and the loop keeps running. The engine counts
as wedged from a failed step until a later step produces a token.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from hinge.engine.output import OutputAccumulator

logger = logging.getLogger("hinge.server")


class EngineError(RuntimeError):
    """The engine failed while running a request (an internal fault, not the client's input)."""


class EngineObserver(Protocol):
    def on_first_token(self, ttft_s: float) -> None: ...
    def on_tokens(self, num_tokens: int, gap_s: float | None) -> None: ...
    def on_finish(self, output: Any) -> None: ...
    def on_error(self) -> None: ...


_ABORTED = object()  #: queue sentinel: the request was aborted and the engine sent no final output


@dataclass
class _Stream:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue
    submitted_at: float = field(default_factory=time.perf_counter)
    last_token_at: float | None = None
    num_tokens: int = 0


class RequestHandle:
    """One submitted request: iterate it for ``RequestOutput``s; ``abort()`` is idempotent."""

    def __init__(self, owner: AsyncEngine, rid: str, stream: _Stream) -> None:
        self.owner, self.rid, self._stream = owner, rid, stream
        self.finished = False
        self.aborted = False
        self._whole = OutputAccumulator()  #: the engine sends deltas; callers read whole lists

    async def __aiter__(self) -> AsyncIterator[Any]:
        try:
            while not self.finished:
                item = await self._stream.queue.get()
                if isinstance(item, BaseException):
                    self.finished = True
                    raise item
                if item is _ABORTED:
                    self.finished = self.aborted = True
                    return
                if item.finished:
                    self.finished = True
                yield self._whole.add(item)
        finally:
            if not self.finished:
                self.abort()

    def abort(self) -> None:
        if not self.finished:
            self.finished = self.aborted = True
            self.owner._forget(self.rid)
            self.owner.submit_call(lambda: self.owner.engine.abort_request(self.rid))


class AsyncEngine:
    def __init__(self, engine: Any, observer: EngineObserver | None = None) -> None:
        self.engine = engine
        self.observer = observer
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._streams: dict[str, _Stream] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.wedged = False  #: the last step raised and no step has produced a token since
        self.step_started_at: float | None = None  #: perf_counter of the step now running
        self.last_error: str | None = None
        self.last_stats: Any = None

    # lifecycle
    def start(self) -> None:
        assert self._thread is None, "AsyncEngine.start() called twice"
        self._thread = threading.Thread(target=self._run, name="hinge-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Abort every request, stop the thread and close the engine."""
        if self._thread is None:
            return
        for rid in list(self._streams):
            self._abort_locally(rid)
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        self._thread = None
        close = getattr(self.engine, "close", None)
        if close is not None:
            close()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def is_wedged(self, step_timeout_s: float) -> bool:
        """The last step failed, or the step now running has taken longer than the timeout."""
        started = self.step_started_at
        stuck = started is not None and time.perf_counter() - started > step_timeout_s
        return self.wedged or stuck or (self._thread is not None and not self.alive)

    @property
    def num_active(self) -> int:
        return len(self._streams)

    # calls into the engine thread
    def submit_call(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.put((fn, fut))
        self._wake.set()
        return fut

    async def call(self, fn: Callable[[], Any], timeout: float | None = None) -> Any:
        """Run ``fn`` on the engine thread between steps and return its result."""
        if not self.alive:
            raise EngineError("the engine thread is not running")
        return await asyncio.wait_for(asyncio.wrap_future(self.submit_call(fn)), timeout)

    async def submit(self, prompt_ids: list[int], params: Any, rid: str | None = None) -> RequestHandle:
        """Add a request; raises ``ValueError`` (the engine's message) for bad input."""
        rid = rid or uuid.uuid4().hex
        stream = _Stream(asyncio.get_running_loop(), asyncio.Queue())
        with self._lock:
            if rid in self._streams:
                raise ValueError(f"request id {rid!r} is already running; pick another rid")
            self._streams[rid] = stream
        handle = RequestHandle(self, rid, stream)
        try:
            await self.call(lambda: self.engine.add_request(prompt_ids, params, rid))
        except BaseException:
            handle.abort()  # NOTE: a cancelled add still runs later; the queued abort follows it
            raise
        return handle

    async def generate(self, prompt_ids: list[int], params: Any,
                       rid: str | None = None) -> AsyncIterator[Any]:
        handle = await self.submit(prompt_ids, params, rid)
        try:
            async for output in handle:
                yield output
        finally:
            handle.abort()

    async def abort(self, rid: str) -> bool:
        """Abort a running request by id; its stream ends with finish reason "abort"."""
        found = rid in self._streams
        result = await self.call(lambda: self.engine.abort_request(rid))
        self._abort_locally(rid)
        return bool(result) or found

    # engine thread
    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            self._run_calls()
            if self._stop.is_set():
                break
            try:
                busy = self.engine.has_unfinished()
            except Exception as exc:  # noqa: BLE001 - an engine fault must not kill the loop
                self._fail_all(exc)
                busy = False
            if not busy:
                self._wake.wait(0.5)
                continue
            self.step_started_at = time.perf_counter()
            try:
                outputs = self.engine.step()
            except Exception as exc:  # noqa: BLE001
                self._fail_all(exc)
                continue
            finally:
                self.step_started_at = None
            if any(out.new_token_ids for out in outputs):
                self.wedged = False
            for out in outputs:
                self._deliver(out)
        self._run_calls()

    def _run_calls(self) -> None:
        while True:
            try:
                fn, fut = self._calls.get_nowait()
            except queue.Empty:
                return
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller
                fut.set_exception(exc)

    def _deliver(self, out: Any) -> None:
        stream = self._streams.get(out.rid)
        if stream is None:
            return
        now = time.perf_counter()
        num_new = len(out.new_token_ids)
        if self.observer is not None and num_new:
            if stream.last_token_at is None:
                self.observer.on_first_token(now - stream.submitted_at)
                gap = None if num_new == 1 else 0.0
            else:
                gap = now - stream.last_token_at
            self.observer.on_tokens(num_new, gap)
        if num_new:
            stream.last_token_at = now
            stream.num_tokens += num_new
        if out.finished:
            self._forget(out.rid)
            if self.observer is not None:
                self.observer.on_finish(out)
        self._put(stream, out)

    def _fail_all(self, exc: Exception) -> None:
        self.wedged = True
        self.last_error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        logger.error("engine step failed; failing %d request(s):\n%s", len(self._streams),
                     "".join(traceback.format_exception(exc)))
        with self._lock:
            streams, self._streams = dict(self._streams), {}
        error = EngineError(f"internal engine error: {self.last_error}")
        for rid, stream in streams.items():
            if self.observer is not None:
                self.observer.on_error()
            self._put(stream, error)
            try:
                self.engine.abort_request(rid)
            except Exception:  # noqa: BLE001
                logger.exception("abort of %s after a failed step also failed", rid)

    def _put(self, stream: _Stream, item: Any) -> None:
        try:
            stream.loop.call_soon_threadsafe(stream.queue.put_nowait, item)
        except RuntimeError:  # the caller's loop is closed: nobody is listening
            pass

    def _forget(self, rid: str) -> _Stream | None:
        with self._lock:
            return self._streams.pop(rid, None)

    def _abort_locally(self, rid: str) -> None:
        stream = self._forget(rid)
        if stream is not None:
            self._put(stream, _ABORTED)
