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
    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await _reply(send, 400, "the Content-Length header is not a number")
                return
            if int(declared) > self.limit:
                await _reply(
                    send,
                    413,
                    f"the request body has {int(declared)} bytes, more than the {self.limit} "
                    "allowed: send fewer or shorter texts per request",
                )
                return
        received, started = 0, False

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _TooLarge(self.limit)
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
    """`Authorization: Bearer KEY` required on paths under `prefix`, checked before the body is read."""

    def __init__(self, app, key: str, prefix: str = "/v1/") -> None:
        self.app, self.key, self.prefix = app, key.encode(), prefix

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self.prefix) and scope.get("method") != "OPTIONS":
            given = dict(scope["headers"]).get(b"authorization", b"")
            scheme, _, token = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self.key):
                await _reply(
                    send,
                    401,
                    "this server needs an API key: send the header Authorization: Bearer KEY",
                    [(b"www-authenticate", b"Bearer")],
                )
                return
        await self.app(scope, receive, send)
