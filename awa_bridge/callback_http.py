"""A minimal WSGI receiver for external callbacks, with Awa's signature scheme.

Mount it in any WSGI server (or adapt the few lines to your framework's
routing)::

    app = callback_receiver(database_url, secret=bytes.fromhex(os.environ["AWA_CALLBACK_SECRET"]))

    POST /api/callbacks/<callback_id>/complete   body: JSON payload (optional)
    POST /api/callbacks/<callback_id>/fail       body: {"error": "why"}
    POST /api/callbacks/<callback_id>/retry
    header X-Awa-Signature: sign_callback(secret, callback_id)

Answers: 200 with the job's id and new state; 401 for a missing or wrong
signature (checked in constant time, before the database is touched); 404
for an unknown callback (never registered, or one an earlier attempt of a
job that has run again since registered); 409 when it was already resolved,
timed out, or its attempt ended; 400 for a malformed body; 408 when the body
does not arrive in time; 413 past ``MAX_BODY_BYTES``; 405 for other methods.

Bodies are read the same way whatever the framing: ``Content-Length``, or
``Transfer-Encoding: chunked`` (decoded here when the server passes the raw
stream, as wsgiref does; read to its end when the server decoded it and says
so with ``wsgi.input_terminated``, as gunicorn does). The size limit holds
for every framing, and the whole body must arrive within
``BODY_TIMEOUT_SECONDS``; ``serve_callbacks`` runs the receiver on wsgiref
with a socket timeout so a client that stalls mid-request is dropped too.

Signatures. Awa's scheme signs the callback id only (the default, so Awa's
own workers and this receiver accept each other's requests). Anyone who
captures one request can then replay it, as another action too. Pass
``scheme="request"`` to require instead ``sign_request`` over the id, the
action, a Unix timestamp (header ``X-Awa-Timestamp``, accepted within
``max_age`` seconds of the receiver's clock) and the exact body bytes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from .callbacks import (
    DEFAULT_PATH_PREFIX,
    complete_external,
    fail_external,
    retry_external,
    verify_callback,
    verify_request,
)
from .errors import CallbackNotFound, CallbackNotWaiting, ValidationError

MAX_BODY_BYTES = 1 << 20
BODY_TIMEOUT_SECONDS = 10.0
DEFAULT_MAX_AGE_SECONDS = 300
TIMESTAMP_HEADER = "X-Awa-Timestamp"
SCHEMES = ("id", "request")
_CHUNK_LINE_LIMIT = 1024

Respond = Callable[[str, list[tuple[str, str]]], Any]


class _BodyError(Exception):
    """A body that cannot be read: answered with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


def callback_receiver(
    database_url: str,
    secret: bytes,
    prefix: str = DEFAULT_PATH_PREFIX,
    *,
    scheme: str = "id",
    max_age: float = DEFAULT_MAX_AGE_SECONDS,
) -> Callable[..., Any]:
    """A WSGI application resolving callbacks on ``database_url``.

    ``scheme``: ``"id"`` (Awa's: the signature covers the callback id) or
    ``"request"`` (it covers id, action, timestamp and body; see the module
    docstring).
    """
    verify_callback(secret, "check", "0")  # validates the secret's length up front
    if scheme not in SCHEMES:
        raise ValidationError("scheme", f"must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    base = "/" + prefix.strip("/") + "/"

    def app(environ: dict[str, Any], start_response: Respond) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if not path.startswith(base):
            return _answer(start_response, 404, {"error": "not a callback path"})
        parts = path[len(base) :].strip("/").split("/")
        if len(parts) != 2 or parts[1] not in ("complete", "fail", "retry"):
            return _answer(start_response, 404, {"error": "expected /<callback_id>/complete|fail|retry"})
        if environ.get("REQUEST_METHOD") != "POST":
            return _answer(start_response, 405, {"error": "use POST"})
        callback_id, action = parts
        signature = environ.get("HTTP_X_AWA_SIGNATURE", "")
        if scheme == "id" and not verify_callback(secret, callback_id, signature):
            return _answer(start_response, 401, {"error": "missing or invalid X-Awa-Signature"})
        try:
            raw = read_body(environ)
        except _BodyError as exc:
            return _answer(start_response, exc.status, {"error": str(exc)})
        if scheme == "request":
            refused = _check_request_signature(environ, secret, callback_id, action, raw, max_age)
            if refused:
                return _answer(start_response, 401, {"error": refused})
        return _resolve(start_response, database_url, callback_id, action, raw)

    return app


def _check_request_signature(
    environ: dict[str, Any], secret: bytes, callback_id: str, action: str, body: bytes, max_age: float
) -> str | None:
    """The reason to refuse the request, or None when its signature and timestamp hold."""
    stamp = environ.get("HTTP_X_AWA_TIMESTAMP", "")
    if not stamp.isdigit() or len(stamp) > 12:
        return f"missing or malformed {TIMESTAMP_HEADER} (Unix seconds)"
    if abs(time.time() - int(stamp)) > max_age:
        return f"{TIMESTAMP_HEADER} is more than {max_age:.0f} s away from the receiver's clock"
    signature = environ.get("HTTP_X_AWA_SIGNATURE", "")
    if not verify_request(secret, callback_id, action, int(stamp), body, signature):
        return "missing or invalid X-Awa-Signature (request scheme: id, action, timestamp and body)"
    return None


def _resolve(start_response: Respond, database_url: str, callback_id: str, action: str, raw: bytes) -> list[bytes]:
    try:
        body = _parse_json(raw)
        if action == "complete":
            row = complete_external(database_url, callback_id, body)
        elif action == "fail":
            if not isinstance(body, dict) or "error" not in body:
                raise ValidationError("error", 'send {"error": "why it failed"}')
            row = fail_external(database_url, callback_id, body["error"])
        else:
            row = retry_external(database_url, callback_id)
    except CallbackNotWaiting as exc:
        return _answer(start_response, 409, {"error": str(exc), "job_id": exc.job_id, "state": exc.state})
    except CallbackNotFound as exc:
        return _answer(start_response, 404, {"error": str(exc)})
    except ValidationError as exc:
        return _answer(start_response, 400, {"error": str(exc)})
    return _answer(start_response, 200, {"job_id": row["id"], "state": row["state"]})


def read_body(environ: dict[str, Any], limit: int = MAX_BODY_BYTES, timeout: float = BODY_TIMEOUT_SECONDS) -> bytes:
    """The request body, whatever its framing, at most ``limit`` bytes, within ``timeout`` seconds."""
    stream = environ["wsgi.input"]
    deadline = time.monotonic() + timeout
    encoding = environ.get("HTTP_TRANSFER_ENCODING", "").lower()
    try:
        if "chunked" in encoding and not environ.get("wsgi.input_terminated"):
            return _read_chunked(stream, limit, deadline)
        length_header = (environ.get("CONTENT_LENGTH") or "").strip()
        if length_header and "chunked" not in encoding:
            if not length_header.isdigit():
                raise _BodyError(400, f"Content-Length must be a non-negative integer, got {length_header!r}")
            length = int(length_header)
            if length > limit:
                raise _BodyError(413, f"the body is {length} bytes; the limit is {limit}")
            return _read_exactly(stream, length, deadline)
        if environ.get("wsgi.input_terminated"):
            return _read_to_end(stream, limit, deadline)
        return b""
    except (TimeoutError, OSError) as exc:
        raise _BodyError(408, f"the body did not arrive in time ({exc.__class__.__name__})") from None


def _check_deadline(deadline: float) -> None:
    if time.monotonic() > deadline:
        raise _BodyError(408, "the body did not arrive in time")


def _read_exactly(stream: Any, length: int, deadline: float) -> bytes:
    parts: list[bytes] = []
    remaining = length
    while remaining:
        _check_deadline(deadline)
        piece = stream.read(min(remaining, 65536))
        if not piece:
            raise _BodyError(400, f"the body ended after {length - remaining} of {length} bytes")
        parts.append(piece)
        remaining -= len(piece)
    return b"".join(parts)


def _read_to_end(stream: Any, limit: int, deadline: float) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        _check_deadline(deadline)
        piece = stream.read(65536)
        if not piece:
            return b"".join(parts)
        size += len(piece)
        if size > limit:
            raise _BodyError(413, f"the body is over the limit of {limit} bytes")
        parts.append(piece)


def _read_chunked(stream: Any, limit: int, deadline: float) -> bytes:
    """Decode ``Transfer-Encoding: chunked`` from the raw stream (RFC 9112 section 7.1)."""
    parts: list[bytes] = []
    size = 0
    while True:
        _check_deadline(deadline)
        line = stream.readline(_CHUNK_LINE_LIMIT)
        if not line.endswith(b"\n"):
            raise _BodyError(400, "malformed chunked body (chunk size line)")
        size_text = line.split(b";", 1)[0].strip()
        if not size_text or len(size_text) > 16 or size_text.strip(b"0123456789abcdefABCDEF"):
            raise _BodyError(400, f"malformed chunked body (chunk size {size_text[:20]!r})")
        chunk = int(size_text, 16)
        if chunk == 0:
            break
        size += chunk
        if size > limit:
            raise _BodyError(413, f"the body is over the limit of {limit} bytes")
        parts.append(_read_exactly(stream, chunk, deadline))
        if stream.readline(_CHUNK_LINE_LIMIT).strip():
            raise _BodyError(400, "malformed chunked body (no CRLF after a chunk)")
    for _ in range(100):  # trailer fields, then the empty line
        _check_deadline(deadline)
        trailer = stream.readline(_CHUNK_LINE_LIMIT)
        if not trailer.strip():
            return b"".join(parts)
    raise _BodyError(400, "malformed chunked body (too many trailer fields)")


def _parse_json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValidationError("body", "is nested too deeply") from None
    except ValueError as exc:
        raise ValidationError("body", f"is not JSON ({exc})") from None


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    409: "Conflict",
    413: "Content Too Large",
}


def _answer(start_response: Respond, status: int, body: dict[str, Any]) -> list[bytes]:
    data = json.dumps(body).encode("utf-8")
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    start_response(f"{status} {_REASONS[status]}", headers)
    return [data]


def serve_callbacks(
    app: Callable[..., Any], host: str = "127.0.0.1", port: int = 8000, socket_timeout: float = BODY_TIMEOUT_SECONDS
) -> Any:
    """A wsgiref server for ``app`` whose connections time out after ``socket_timeout`` idle seconds.

    Returns the server (call ``serve_forever()``); for production, run the
    app under gunicorn or uWSGI with their own timeouts.
    """
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class TimedHandler(WSGIRequestHandler):
        timeout = socket_timeout  # StreamRequestHandler sets it on the connection's socket

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class ThreadingServer(ThreadingMixIn, WSGIServer):
        daemon_threads = True

    return make_server(host, port, app, server_class=ThreadingServer, handler_class=TimedHandler)
