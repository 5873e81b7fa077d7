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
for an unknown callback; 409 when it was already resolved or timed out; 400
for a malformed body; 405 for other methods.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from .callbacks import DEFAULT_PATH_PREFIX, complete_external, fail_external, retry_external, verify_callback
from .errors import CallbackNotFound, CallbackNotWaiting, ValidationError

MAX_BODY_BYTES = 1 << 20

Respond = Callable[[str, list[tuple[str, str]]], Any]


def callback_receiver(database_url: str, secret: bytes, prefix: str = DEFAULT_PATH_PREFIX) -> Callable[..., Any]:
    """A WSGI application resolving callbacks on ``database_url``."""
    verify_callback(secret, "check", "0")  # validates the secret's length up front
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
        if not verify_callback(secret, callback_id, environ.get("HTTP_X_AWA_SIGNATURE", "")):
            return _answer(start_response, 401, {"error": "missing or invalid X-Awa-Signature"})
        try:
            body = _read_json(environ)
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

    return app


def _read_json(environ: dict[str, Any]) -> Any:
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise ValidationError("body", "Content-Length is not a number") from None
    if length > MAX_BODY_BYTES:
        raise ValidationError("body", f"is {length} bytes; the limit is {MAX_BODY_BYTES}")
    raw = environ["wsgi.input"].read(length) if length else b""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ValidationError("body", f"is not JSON ({exc})") from None


def _answer(start_response: Respond, status: int, body: dict[str, Any]) -> list[bytes]:
    reasons = {
        200: "OK",
        400: "Bad Request",
        401: "Unauthorized",
        404: "Not Found",
        405: "Method Not Allowed",
        409: "Conflict",
    }
    data = json.dumps(body).encode("utf-8")
    start_response(
        f"{status} {reasons[status]}", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    )
    return [data]
