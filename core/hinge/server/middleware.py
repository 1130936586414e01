"""ASGI guards in front of every route: the API key (401) and the request body limit (413)."""

from __future__ import annotations

import hmac
import json
from typing import Any

Scope = dict[str, Any]

OPEN_PATHS = frozenset({"/health"})  #: reachable without the API key


async def _reply(send: Any, status: int, message: str, kind: str) -> None:
    body = json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class GuardMiddleware:
    """Checks ``Authorization: Bearer KEY`` and reads the whole body (Content-Length or chunked)
    up to ``max_request_bytes`` before the app sees it, then replays it."""

    def __init__(self, app: Any, api_key: str | None, max_request_bytes: int) -> None:
        self.app, self.api_key, self.max_request_bytes = app, api_key, max_request_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        if self.api_key and scope.get("path") not in OPEN_PATHS:
            given = headers.get(b"authorization", b"").decode("latin-1")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.api_key}".encode()):
                await _reply(send, 401, "missing or wrong API key; send "
                                        "`Authorization: Bearer <key>`", "authentication_error")
                return
        limit = self.max_request_bytes
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await _reply(send, 400, f"bad Content-Length {declared!r}", "invalid_request_error")
                return
            if size > limit:
                await _reply(send, 413, _too_large(size, limit), "request_too_large")
                return
        chunks, total = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > limit:
                await _reply(send, 413, _too_large(total, limit), "request_too_large")
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _too_large(size: int, limit: int) -> str:
    return (f"request body of at least {size} bytes exceeds the limit of {limit} bytes; "
            "send a smaller request or raise the server's max_request_bytes")
