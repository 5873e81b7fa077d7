"""A local mail provider for the receipts lab: a real HTTP server in its own process.

    python examples/receipts_lab_provider.py --port-file PATH [--lifetime 120]

It listens on 127.0.0.1 only (an ephemeral port, written to ``--port-file``
once it accepts connections), answers at most ``--max-requests`` requests
and stops by itself after ``--lifetime`` seconds (or on SIGTERM / SIGINT),
so a lab that dies never leaves it running for long. Two accounts:

``POST /idempotent/v1/messages``
    honours ``Idempotency-Key``: the first request with a key delivers and
    remembers (key, payload hash, response); a replay with the same payload
    gets the ORIGINAL response (header ``Idempotent-Replayed: true``) and
    delivers nothing; the same key with a changed payload gets
    ``422 {"error": "operation_conflict"}`` and delivers nothing.
``POST /plain/v1/messages``
    ignores the header: every request delivers a message.
``GET /idempotent/v1/messages?idempotency_key=K``
    what the provider did with key K (404 if nothing): how an operator
    reconciles an unknown outcome.
``GET /stats``
    per ``X-Lab-Case`` header: requests, delivered, replayed, conflicts.

The body is JSON ``{"to": ..., "subject": ..., "amount_cents": ...}``, at
most 64 KiB. Requests are handled one at a time under a lock, so a replay
racing its original sees a consistent table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

MAX_BODY = 64 * 1024
SEND_PATHS = {"/idempotent/v1/messages": True, "/plain/v1/messages": False}


class Mailbox:
    """The provider's state: delivered messages, remembered keys, per-case counters."""

    def __init__(self, max_requests: int) -> None:
        self.lock = threading.Lock()
        self.max_requests = max_requests
        self.total = 0
        self.delivered: list[dict[str, Any]] = []
        self.keys: dict[str, tuple[str, dict[str, Any]]] = {}  # key -> (payload hash, original response)
        self.stats: dict[str, dict[str, int]] = {}

    def count(self, case: str, what: str) -> None:
        counters = self.stats.setdefault(case, {"requests": 0, "delivered": 0, "replayed": 0, "conflicts": 0})
        counters[what] += 1

    def send(self, case: str, key: str | None, remembers: bool, message: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(HTTP status, response body) for one send request."""
        digest = hashlib.sha256(json.dumps(message, sort_keys=True).encode()).hexdigest()
        with self.lock:
            self.count(case, "requests")
            if remembers and key is not None and key in self.keys:
                known_digest, response = self.keys[key]
                if known_digest != digest:
                    self.count(case, "conflicts")
                    return 422, {
                        "error": "operation_conflict",
                        "message": f"Idempotency-Key {key} was first used with a different payload",
                    }
                self.count(case, "replayed")
                return 200, {**response, "replayed": True}
            message_id = f"msg-{len(self.delivered) + 1:06d}"
            self.delivered.append({"message_id": message_id, "case": case, "idempotency_key": key, **message})
            self.count(case, "delivered")
            response = {"message_id": message_id, "status": "delivered"}
            if remembers and key is not None:
                self.keys[key] = (digest, response)
            return 200, {**response, "replayed": False}


def make_handler(box: Mailbox, stop: threading.Event) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "receipts-lab-mail/1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def reply(self, status: int, body: dict[str, Any], replayed: bool = False) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if replayed:
                self.send_header("Idempotent-Replayed", "true")
            self.end_headers()
            self.wfile.write(data)

        def admit(self) -> bool:
            with box.lock:
                box.total += 1
                over = box.total > box.max_requests
            if over:
                stop.set()
                self.reply(503, {"error": "request_limit", "message": f"served {box.max_requests} requests"})
            return not over

        def do_GET(self) -> None:
            if not self.admit():
                return
            url = urlsplit(self.path)
            if url.path == "/stats":
                with box.lock:
                    self.reply(200, {"cases": box.stats, "delivered": len(box.delivered)})
            elif url.path == "/idempotent/v1/messages":
                key = (parse_qs(url.query).get("idempotency_key") or [""])[0]
                with box.lock:
                    known = box.keys.get(key)
                if known is None:
                    self.reply(404, {"error": "not_found", "message": f"no request with Idempotency-Key {key!r}"})
                else:
                    self.reply(200, known[1])
            else:
                self.reply(404, {"error": "not_found"})

        def do_POST(self) -> None:
            if not self.admit():
                return
            remembers = SEND_PATHS.get(urlsplit(self.path).path)
            if remembers is None:
                self.reply(404, {"error": "not_found"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY:
                self.reply(400, {"error": "bad_request", "message": f"body must be 1 to {MAX_BODY} bytes"})
                return
            try:
                message = json.loads(self.rfile.read(length))
            except ValueError:
                message = None
            if not isinstance(message, dict) or not isinstance(message.get("to"), str):
                self.reply(400, {"error": "bad_request", "message": 'body must be a JSON object with "to"'})
                return
            case = self.headers.get("X-Lab-Case") or "-"
            status, body = box.send(case, self.headers.get("Idempotency-Key"), remembers, message)
            self.reply(status, body, replayed=bool(body.get("replayed")))

    return Handler


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port-file", required=True, help="where to write the port once listening")
    parser.add_argument("--lifetime", type=float, default=120.0, help="stop by itself after this many seconds")
    parser.add_argument("--max-requests", type=int, default=10_000, help="stop after serving this many requests")
    ns = parser.parse_args()

    stop = threading.Event()
    box = Mailbox(ns.max_requests)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(box, stop))
    server.daemon_threads = True
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    port_file = Path(ns.port_file)
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(str(server.server_address[1]))
    os.replace(tmp, port_file)  # readers never see a half-written port
    stop.wait(ns.lifetime)
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
