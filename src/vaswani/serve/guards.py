"""ASGI middleware that answers before the application reads a body: the API key (401) and the body size
limit (413, before reading when Content-Length says so, else as soon as a streamed body passes it)."""

import hmac
import json

from fastapi import HTTPException


class _TooLarge(HTTPException):
    """Raised from `receive`: FastAPI passes HTTPExceptions on to the app's error handler (a JSON 413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            413, f"the request body is larger than the {limit} bytes allowed: send fewer or shorter texts per request"
        )


class BodyLimit:
    def __init__(self, app, limit: int, limits: dict[str, int] | None = None) -> None:
        self.app, self.default, self.limits = app, limit, limits or {}  # limits: a path's own bound

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.get(scope.get("path", ""), self.default)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await _reply(send, 400, "the Content-Length header is not a number")
                return
            if int(declared) > limit:
                await _reply(
                    send,
                    413,
                    f"the request body has {int(declared)} bytes, more than the {limit} "
                    "allowed: send fewer or shorter texts per request",
                )
                return
        received, started = 0, False

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge(limit)
            return message

        async def tracking_send(message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge as error:
            if not started:
                await _reply(send, 413, error.detail)


async def _reply(send, status: int, message: str, headers: list | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class ApiKey:
    """`Authorization: Bearer KEY` required on the paths under each prefix of `keys` ({prefix: key}), checked
    before the body is read: the API's key on /v1/, and on /metrics the API's or a scraper's own token."""

    def __init__(self, app, keys: dict[str, str]) -> None:
        self.app, self.keys = app, {prefix: key.encode() for prefix, key in keys.items()}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope.get("method") != "OPTIONS":
            key = next((k for prefix, k in self.keys.items() if scope["path"].startswith(prefix)), None)
            if key is not None:
                given = dict(scope["headers"]).get(b"authorization", b"")
                scheme, _, token = given.partition(b" ")
                if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), key):
                    what = "a metrics token" if scope["path"].startswith("/metrics") else "an API key"
                    await _reply(
                        send,
                        401,
                        f"this server needs {what}: send the header Authorization: Bearer KEY",
                        [(b"www-authenticate", b"Bearer")],
                    )
                    return
        await self.app(scope, receive, send)
