"""The ASGI server's door for request bodies.

Django's ASGI handler reads a whole body, of any size and at any pace, before
anything looks at it. Here a declared Content-Length over the limit is a 413
before a byte is read, a body (declared or chunked) is counted as it arrives
and refused with a 413 the moment it passes the limit, and a body that has not
fully arrived REQUEST_BODY_TIMEOUT seconds after its headers is a 408. A slow
client holds only its own connection: no thread, no database connection.
"""

from __future__ import annotations

import asyncio
import json

# What every answer carries, whoever writes it (Django's middleware gives its own answers the same).
SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"content-security-policy", b"default-src 'none'")]


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every answer of an ASGI app that does not set them itself (the MCP
    server's, whose SDK writes its own answers)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message):
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", ())}
                message = {
                    **message,
                    "headers": list(message.get("headers", ()))
                    + [(k, v) for k, v in SECURITY_HEADERS if k not in present],
                }
            await send(message)

        return await self.app(scope, receive, with_headers)


class BodyGuard:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        from django.conf import settings

        limit = settings.REQUEST_BODY_MAX_BYTES
        declared = _header(scope, b"content-length")
        if declared is not None:
            try:
                length = int(declared)
                if length < 0:
                    raise ValueError
            except ValueError:
                return await _answer(send, 400, "Content-Length is not a number")
            if length > limit:
                return await _answer(send, 413, _over(limit))
        try:
            async with asyncio.timeout(settings.REQUEST_BODY_TIMEOUT):
                first = await _read_body(receive, limit)
        except asyncio.TimeoutError:
            return await _answer(
                send,
                408,
                f"the request body did not arrive within {settings.REQUEST_BODY_TIMEOUT} seconds; send it again",
            )
        if first is None:  # past the limit
            return await _answer(send, 413, _over(limit))
        if first["type"] == "http.disconnect":
            return None
        if declared is None:  # chunked: the body is whole now, so say its length (DRF reads no length as empty)
            scope = {
                **scope,
                "headers": [(k, v) for k, v in scope.get("headers", ()) if k.lower() != b"transfer-encoding"]
                + [(b"content-length", str(len(first["body"])).encode())],
            }
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return first
            return await receive()  # after the body: the disconnect Django listens for

        return await self.app(scope, replay, send)


async def _read_body(receive, limit: int) -> dict | None:
    """The whole body as one message, None past ``limit``, or the disconnect message."""
    parts, total = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return message
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            return {"type": "http.request", "body": b"".join(parts), "more_body": False}


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _over(limit: int) -> str:
    return f"the request body is over the limit of {limit} bytes"


async def _answer(send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                (b"cache-control", b"no-store"),
                *SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
