"""Docs that cannot drift: every ```python and ```sql block of README.md and docs/howto/*.md runs here.

The blocks of one document run in order in one namespace (as a reader types
them into one session), on a real migrated database; a block with top-level
``await`` runs on the document's event loop. The namespace starts with what a
reader is assumed to have: ``url`` (a migrated database, also in
``$DATABASE_URL``), ``email``, and an ``orders`` table.

A line ``<!-- doc-test: NAME ... -->`` right before a block's fence adds a
fixture of the ``PROFILES`` below (the rendered Markdown does not show it);
``<!-- doc-test: standalone -->`` runs a block that a reader would copy on
its own in a fresh namespace (only ``url``, ``DATABASE_URL``, ``email`` and
its other profiles), so a name it uses without importing or defining it fails
here as it would for the reader; ``<!-- illustration -->`` marks a block that
only illustrates (a file of another project, a configuration excerpt) and is
not run. Keep those few.
"""

from __future__ import annotations

import ast
import asyncio
import re
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from awa_bridge.migrations import migrate

from .dbutil import with_driver

REPO = Path(__file__).resolve().parent.parent
DOCUMENTS = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs" / "howto").glob("*.md"))]
_FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
_SQL_FENCE = re.compile(r"^```sql\n(.*?)^```", re.MULTILINE | re.DOTALL)
_MARK = re.compile(r"^<!--\s*(illustration|doc-test:\s*(.*?))\s*-->$")


@dataclass
class Block:
    document: str
    line: int
    code: str
    illustration: bool = False
    profiles: list[str] = field(default_factory=list)


def blocks(document: str, fence: re.Pattern[str] = _FENCE) -> list[Block]:
    text = (REPO / document).read_text(encoding="utf-8")
    found = []
    for match in fence.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = [ln.strip() for ln in text[: match.start()].splitlines() if ln.strip()]
        mark = _MARK.match(before[-1]) if before else None
        block = Block(document, line, match.group(1))
        if mark and mark.group(1) == "illustration":
            block.illustration = True
        elif mark:
            block.profiles = mark.group(2).split()
        found.append(block)
    return found


# -- what a block may ask for -------------------------------------------------------------------


ORDERS = """
DROP TABLE IF EXISTS orders, refunds;
CREATE TABLE orders (
    id serial PRIMARY KEY, customer text, email text, paid boolean NOT NULL DEFAULT false,
    status text NOT NULL DEFAULT 'new'
);
CREATE TABLE refunds (id serial PRIMARY KEY, order_id int NOT NULL, cents int NOT NULL);
DROP TABLE IF EXISTS invoices;
CREATE TABLE invoices (id serial PRIMARY KEY, receipt_message_id text);
"""


def _sqlalchemy(ns: dict[str, Any], request: pytest.FixtureRequest) -> None:
    """``engine`` (psycopg dialect) and a mapped ``Order`` over the orders table."""
    from sqlalchemy import create_engine

    class Base(DeclarativeBase):
        pass

    class Order(Base):
        __tablename__ = "orders"
        id: Mapped[int] = mapped_column(primary_key=True)
        customer: Mapped[str | None]
        email: Mapped[str | None]
        status: Mapped[str] = mapped_column(default="new")

    engine = create_engine(with_driver(ns["url"], "psycopg"))
    request.addfinalizer(engine.dispose)
    ns.update(engine=engine, Order=Order)


def _django(ns: dict[str, Any], request: pytest.FixtureRequest) -> None:
    """Django's ``default`` alias on the database, with the test app's ``Order`` model."""
    request.getfixturevalue("django_setup")
    from django.db import connection

    from tests.django.testapp.models import Order

    with connection.schema_editor() as editor:
        editor.execute("DROP TABLE IF EXISTS testapp_order")
        editor.create_model(Order)
    request.addfinalizer(lambda: _drop_django_orders())
    ns["Order"] = Order


def _drop_django_orders() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS testapp_order")


def _jobs_42(ns: dict[str, Any], request: pytest.FixtureRequest) -> None:
    """Jobs 42 (failed), 43 (scheduled), 44 (completed) and a unique send_email job, for the admin examples."""
    from awa_bridge import insert_job_sync

    with psycopg.connect(ns["url"], autocommit=True) as conn:
        conn.execute("SELECT setval('awa.jobs_id_seq', 41)")
        states = {"failed": "failed", "scheduled": "scheduled", "completed": "completed"}
        for state in states:
            job = insert_job_sync(conn, {"to": "x@example.com"}, kind="send_email", queue="email")
            conn.execute("UPDATE awa.jobs SET state = %s WHERE id = %s", (state, job.id))
        insert_job_sync(conn, {"to": "a@b.c"}, kind="send_email", queue="email", unique=True)


def _stops_on_sigterm(ns: dict[str, Any], request: pytest.FixtureRequest) -> None:
    """The block runs a worker until SIGTERM: this process sends itself one 1.5 s later."""

    def early(signum: int, frame: Any) -> None:
        raise AssertionError("SIGTERM arrived before the worker installed its handler")

    previous = signal.signal(signal.SIGTERM, early)
    signal.setitimer(signal.ITIMER_REAL, 1.5)
    alarm = signal.signal(signal.SIGALRM, lambda *_: signal.raise_signal(signal.SIGTERM))

    def restore() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, alarm)
        signal.signal(signal.SIGTERM, previous)

    request.addfinalizer(restore)


def _celery_worker(ns: dict[str, Any], request: pytest.FixtureRequest) -> None:
    """A worker for the block's Celery ``app`` (``app.client()``), started once the block defined its task.

    An earlier block's worker is stopped first: it serves that block's app and
    would claim this block's jobs as unknown kinds.
    """
    previous = ns.pop("_celery_worker_finish", None)
    if previous is not None:
        previous()
    ns.pop("result", None)
    stop = threading.Event()

    def work() -> None:
        while "result" not in ns:  # the block has defined its tasks and enqueued
            if stop.wait(0.02):
                return
        client = ns["app"].client(heartbeat_interval=0.2, heartbeat_staleness=1.0)

        async def main() -> None:
            await client.start()
            while not stop.is_set():
                await asyncio.sleep(0.05)
            await client.shutdown(timeout=2)

        asyncio.run(main())

    thread = threading.Thread(target=work, name="docs-celery-worker", daemon=True)
    thread.start()

    def finish() -> None:
        stop.set()
        thread.join(10)

    ns["_celery_worker_finish"] = finish
    request.addfinalizer(finish)


def _celery_shop(ns: dict[str, Any], request: pytest.FixtureRequest) -> None:
    """The app of the guide's diff (``app = Celery("shop")``) and the shop's own services the tasks call."""
    from awa_bridge.celery import Celery, shared_task

    class GatewayTimeout(Exception):
        pass

    ns.update(
        app=Celery("shop"),
        shared_task=shared_task,
        GatewayTimeout=GatewayTimeout,
        gateway=types.SimpleNamespace(charge=lambda order_id, cents: f"ch_{order_id}"),
        rates_api=types.SimpleNamespace(fetch=lambda currency: {currency: 1.0}),
    )
    ns["send_receipt"] = ns["app"].task(lambda order_id, charge_id: None, name="shop.send_receipt")


def _shop_modules(ns: dict[str, Any], request: pytest.FixtureRequest) -> None:
    """The ``shop.tasks`` / ``shop.jobs`` modules a settings example names."""
    import awa_django

    shop, tasks, jobs = (types.ModuleType(name) for name in ("shop", "shop.tasks", "shop.jobs"))
    shop.__path__ = []

    def nightly_report(fmt: str) -> None: ...

    nightly_report.__module__, nightly_report.__qualname__ = tasks.__name__, "nightly_report"
    tasks.nightly_report = awa_django.task(nightly_report)  # type: ignore[attr-defined]
    for module in (shop, tasks, jobs):
        request.getfixturevalue("monkeypatch").setitem(sys.modules, module.__name__, module)


def _client(ns: dict[str, Any], request: pytest.FixtureRequest) -> None:
    """The guide's ``client = Client(url)`` from an earlier page."""
    from awa_bridge.worker import Client

    ns.setdefault("client", Client(ns["url"]))


@dataclass
class ChargeOrder:
    order_id: int


@dataclass
class Payment:
    order_id: int
    cents: int


@dataclass
class ExportReport:
    report_id: int


@dataclass
class RefundOrder:
    order_id: int
    cents: int


@dataclass
class SendReceipt:
    invoice_id: int
    email: str


def _args_classes(ns: dict[str, Any], request: pytest.FixtureRequest) -> None:
    """The args classes a guide's handler examples register (defined in your code)."""
    ns.update(
        ChargeOrder=ChargeOrder,
        Payment=Payment,
        ExportReport=ExportReport,
        RefundOrder=RefundOrder,
        SendReceipt=SendReceipt,
    )


def _mailer(ns: dict[str, Any], request: pytest.FixtureRequest) -> None:
    """An email provider's client: ``mailer.send(...)`` answers with a message id."""
    sent: list[str] = []

    def send(to: str, body: str, idempotency_key: str) -> Any:
        sent.append(idempotency_key)
        return types.SimpleNamespace(id=f"m-{len(sent)}")

    ns["mailer"] = types.SimpleNamespace(send=send, sent=sent)


def _pending_receipt(ns: dict[str, Any], request: pytest.FixtureRequest) -> None:
    """A receipt claimed and committed whose outcome was never saved (the process died), with its ``conn``."""
    from awa_bridge.receipts import receipt

    conn = psycopg.connect(ns["url"], autocommit=True)
    request.addfinalizer(conn.close)
    payload = {"invoice": 42, "to": "ada@example.com"}
    with pytest.raises(ConnectionAbortedError), receipt(conn, "acme", "invoice-email:42", payload):
        raise ConnectionAbortedError  # between the provider call and save()
    ns.update(conn=conn, payload=payload)


PROFILES: dict[str, Callable[[dict[str, Any], pytest.FixtureRequest], None]] = {
    "sqlalchemy": _sqlalchemy,
    "django": _django,
    "jobs-42": _jobs_42,
    "stops-on-sigterm": _stops_on_sigterm,
    "celery-worker": _celery_worker,
    "celery-shop": _celery_shop,
    "shop-modules": _shop_modules,
    "client": _client,
    "args-classes": _args_classes,
    "mailer": _mailer,
    "pending-receipt": _pending_receipt,
}


# -- running ------------------------------------------------------------------------------------


def run_block(block: Block, ns: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    where = f"{block.document}:{block.line}"
    code = compile(block.code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, ns)  # the repository's own documentation
    if asyncio.iscoroutine(result):
        loop.run_until_complete(result)
    if "AWA" in ns and "AWA = {" in block.code:  # a settings example: it must pass validation
        from awa_django.conf import parse_settings

        parse_settings(ns["AWA"])


STANDALONE = "standalone"


def reader_module(name: str, db_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A real module (dataclasses and task kinds look their module up) holding what a reader is assumed to have."""
    module = types.ModuleType(name)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    module.__dict__.update(url=db_url, DATABASE_URL=db_url, email="ada@example.com")
    return module.__dict__


@pytest.fixture
def doc_namespace(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The document's namespace: a real module's globals."""
    monkeypatch.setenv("DATABASE_URL", db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(ORDERS)
    yield reader_module("docs_example", db_url, monkeypatch)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_python_block_runs(document: str, doc_namespace: dict[str, Any], request: pytest.FixtureRequest) -> None:
    loop = asyncio.new_event_loop()
    namespaces = [doc_namespace]
    try:
        for block in blocks(document):
            if block.illustration:
                continue
            ns = doc_namespace
            if STANDALONE in block.profiles:
                name = f"docs_example_line_{block.line}"
                ns = reader_module(name, doc_namespace["url"], request.getfixturevalue("monkeypatch"))
                namespaces.append(ns)
            for profile in block.profiles:
                if profile != STANDALONE:
                    PROFILES[profile](ns, request)
            try:
                run_block(block, ns, loop)
            except Exception as exc:
                raise AssertionError(f"{block.document}:{block.line}: {type(exc).__name__}: {exc}") from exc
    finally:
        for ns in namespaces:
            _close_leftovers(ns, loop)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _close_leftovers(ns: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
    """Connections a reader would close when done (``conn = await asyncpg.connect(url)`` and the like)."""
    for value in list(ns.values()):
        module = type(value).__module__.split(".")[0]
        if module not in ("asyncpg", "psycopg") or not hasattr(value, "close"):
            continue
        closing = value.close()
        if asyncio.iscoroutine(closing):
            loop.run_until_complete(closing)


def test_illustrations_are_few() -> None:
    every = [b for d in DOCUMENTS for b in blocks(d)]
    illustrations = [f"{b.document}:{b.line}" for b in every if b.illustration]
    assert len(every) >= 35
    assert len(illustrations) <= len(every) // 5, illustrations


SQL_BLOCKS = [block for document in DOCUMENTS for block in blocks(document, _SQL_FENCE)]


@pytest.mark.parametrize("block", SQL_BLOCKS, ids=[f"{b.document}:{b.line}" for b in SQL_BLOCKS])
def test_every_sql_block_runs(block: Block, make_database: Callable[[], str]) -> None:
    """As a reader would paste it into psql, on a database of its own (a block may change settings of the schema)."""
    url = make_database()
    migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            conn.execute(block.code)
        except psycopg.Error as exc:
            raise AssertionError(f"{block.document}:{block.line}: {type(exc).__name__}: {exc}") from exc
