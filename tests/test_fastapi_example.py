"""examples/fastapi_app end to end: a real uvicorn server, a real worker process, real PostgreSQL.

The test talks HTTP to the app the way a client would: orders are created
(each with its confirmation job, in one AsyncSession transaction on asyncpg),
the worker subprocess (``python -m awa_bridge worker
examples.fastapi_app.worker:client``) runs the jobs, and ``GET /orders/{id}``
shows them completed and the orders confirmed. A request that fails after the
enqueue (not enough stock) leaves neither an order nor a job behind.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

import awa_bridge

REPO_ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 20.0 * float(os.environ.get("AWA_CHAOS_TIMEOUT_MULTIPLIER", "1"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Process:
    """A subprocess whose output goes to a file (kept for the failure report)."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        self._out = log.open("w")
        self.proc = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=self._out, stderr=subprocess.STDOUT
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text()

    def stop(self) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(5)
        self._out.close()
        return code


def wait_for(predicate: Callable[[], Any], what: str, processes: list[Process]) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while True:
        value = predicate()
        if value:
            return value
        for process in processes:
            if not process.alive():
                raise AssertionError(f"{process.name} exited ({process.proc.returncode}):\n{process.output()}")
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.name}\n{p.output()}" for p in processes)
            raise AssertionError(f"timed out after {TIMEOUT:.0f} s waiting for {what} (last {value!r})\n{logs}")
        time.sleep(0.05)


@pytest.fixture
def service(make_database, tmp_path: Path) -> Iterator[tuple[httpx.Client, str, list[Process]]]:
    url = make_database()
    awa_bridge.migrate(url)  # the deploy step; the app's startup would also do it (a no-op then)
    env = {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1"}
    port = free_port()
    web = Process(
        "uvicorn",
        [sys.executable, "-m", "uvicorn", "examples.fastapi_app.app:app", "--host", "127.0.0.1", "--port", str(port)],
        env,
        tmp_path / "web.log",
    )
    # As the example's README starts it "in another terminal": no DATABASE_URL there, --database-url instead.
    worker_env = {k: v for k, v in env.items() if k != "DATABASE_URL"}
    command = ["worker", "examples.fastapi_app.worker:client", "--database-url", url, "--poll-interval", "0.2"]
    worker = Process(
        "worker",
        [sys.executable, "-m", "awa_bridge", *command],
        worker_env,
        tmp_path / "worker.log",
    )
    processes = [web, worker]
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)

    def healthy() -> bool:
        try:
            return client.get("/health").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(healthy, "the web app to answer /health", processes)
        yield client, url, processes
    finally:
        client.close()
        codes = {p.name: p.stop() for p in processes}
    assert codes["worker"] == 0, f"the worker must shut down gracefully on SIGTERM:\n{worker.output()}"


def counts(url: str) -> tuple[int, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        orders = conn.execute("SELECT count(*) FROM orders").fetchone()[0]
        jobs = conn.execute("SELECT count(*) FROM awa.jobs").fetchone()[0]
    return orders, jobs


def test_orders_are_confirmed_by_the_worker_over_http(service) -> None:
    client, url, processes = service
    created = []
    for email, item, quantity in [
        ("ada@example.com", "book", 2),
        ("bob@example.com", "lamp", 1),
        ("cy@x.org", "book", 3),
    ]:
        response = client.post("/orders", json={"email": email, "item": item, "quantity": quantity})
        assert response.status_code == 201, response.text
        order = response.json()
        assert order["status"] == "pending" and order["email"] == email and order["quantity"] == quantity
        assert order["job"]["kind"] == "send_order_confirmation" and order["job"]["state"] == "available"
        created.append(order)

    def confirmed(order_id: int) -> dict[str, Any] | None:
        body = client.get(f"/orders/{order_id}").json()
        return body if body["status"] == "confirmed" and body["job"]["state"] == "completed" else None

    for order in created:
        done = wait_for(lambda order=order: confirmed(order["id"]), f"order {order['id']} confirmed", processes)
        assert done["confirmed_at"] is not None and done["job"]["id"] == order["job"]["id"]
        assert done["job"]["attempt"] == 1 and done["job"]["errors"] == [] and done["job"]["finalized_at"]
    assert client.get("/jobs/summary").json() == {"send_order_confirmation": {"completed": 3}}

    # Not enough stock: the order was inserted and its job enqueued before the
    # reservation failed, and the rollback removed both.
    refused = client.post("/orders", json={"email": "dee@example.com", "item": "lamp", "quantity": 50})
    assert refused.status_code == 409 and refused.json() == {"detail": "only 4 'lamp' left"}
    unknown = client.post("/orders", json={"email": "dee@example.com", "item": "piano", "quantity": 1})
    assert unknown.status_code == 409 and "unknown item" in unknown.text
    invalid = client.post("/orders", json={"email": "not an address", "item": "book", "quantity": 0})
    assert invalid.status_code == 422
    assert counts(url) == (3, 3)
    assert client.get("/orders/999").status_code == 404
    with psycopg.connect(url, autocommit=True) as conn:
        stock = dict(conn.execute("SELECT item, available FROM stock").fetchall())
        kinds = conn.execute("SELECT DISTINCT kind FROM awa.jobs").fetchall()
    assert stock == {"book": 95, "lamp": 4, "chair": 2}
    assert kinds == [("send_order_confirmation",)]


@pytest.mark.parametrize("field", ["email", "item"])
def test_a_nul_character_in_an_order_is_a_422_not_a_500(service, field: str) -> None:
    """PostgreSQL text cannot store NUL: the app refuses it with a 422 naming the field; nothing is written."""
    client, url, _ = service
    body = {"email": "ada@example.com", "item": "book", "quantity": 1}
    body[field] = body[field].replace("@" if field == "email" else "o", "\x00@" if field == "email" else "\x00", 1)
    response = client.post("/orders", json=body)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", field] and "NUL character" in error["msg"], error
    assert counts(url) == (0, 0)
    assert client.post("/orders", json={"email": "ada@example.com", "item": "book", "quantity": 1}).status_code == 201
