"""awa_sqlalchemy against a real PostgreSQL: mapped models, session enqueue, worker-written rows.

Every supported session type (Session and Connection on psycopg; AsyncSession
and AsyncConnection on asyncpg and psycopg) commits with the application's
rows and rolls back with them. The models read what the worker wrote, the
enum maps to ``JobState``, the mapping matches the migrated tables column for
column, and the application's ``create_all`` / ``drop_all`` never touch awa.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import pytest
from sqlalchemy import ForeignKey, Text, create_engine, event, func, insert, select, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Engine
from sqlalchemy.exc import StatementError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_scoped_session, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, scoped_session, sessionmaker

import awa_bridge
import awa_sqlalchemy
from awa_bridge import JobState, UniqueConflict, UnsupportedConnection
from awa_bridge.worker import Client, TerminalError
from awa_sqlalchemy import AwaBase, CronJob, Job, QueueMeta, insert_job, insert_job_sync, insert_many, insert_many_sync

from .conftest import count_rows
from .dbutil import with_driver
from .waiting import wait_until


class AppBase(DeclarativeBase):
    """An application's own declarative base, as in any SQLAlchemy project."""


class AppOrder(AppBase):
    __tablename__ = "app_orders"  # created per test by the db_url fixture

    id: Mapped[int] = mapped_column(primary_key=True)
    note: Mapped[str] = mapped_column(Text)


@dataclass
class ConfirmOrder:
    order_id: int
    note: str


def jobs(url: str) -> list[tuple[Any, ...]]:
    """Committed jobs, seen from an independent connection."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT kind, args, state::text FROM awa.jobs ORDER BY id").fetchall()


def orders(url: str) -> int:
    return count_rows(url, "SELECT count(*) FROM app_orders")


SYNC_DIALECTS = ["psycopg", "psycopg2"]  # psycopg2: plain postgresql:// on SQLAlchemy 2.0


@pytest.fixture(params=SYNC_DIALECTS)
def sync_engine(request: pytest.FixtureRequest, db_url: str) -> Iterator[Engine]:
    engine = create_engine(with_driver(db_url, request.param))
    yield engine
    engine.dispose()


ASYNC_DIALECTS = ["asyncpg", "psycopg"]


@pytest.fixture(params=ASYNC_DIALECTS)
async def async_engine(request: pytest.FixtureRequest, db_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(with_driver(db_url, request.param))
    yield engine
    await engine.dispose()


# -- enqueue: commit keeps, rollback removes -------------------------------------------------


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
def test_session_enqueue_follows_the_transaction(sync_engine: Engine, db_url: str, commit: bool) -> None:
    with Session(sync_engine) as session:
        with session.begin() as tx:
            order = AppOrder(note="two books")
            session.add(order)
            session.flush()  # assigns order.id: the documented way to refer to it
            order_id = order.id
            job = insert_job_sync(session, ConfirmOrder(order_id=order_id, note=order.note))
            assert job.state is JobState.available and job.args == {"order_id": order_id, "note": "two books"}
            assert jobs(db_url) == [], "nothing is visible before the commit"
            if not commit:
                tx.rollback()
        expected = [("confirm_order", {"order_id": order_id, "note": "two books"}, "available")] if commit else []
        assert jobs(db_url) == expected
        assert orders(db_url) == (1 if commit else 0)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
def test_connection_enqueue_follows_the_transaction(sync_engine: Engine, db_url: str, commit: bool) -> None:
    with sync_engine.connect() as conn, conn.begin() as tx:
        order_id = conn.execute(insert(AppOrder).values(note="lamp").returning(AppOrder.id)).scalar_one()
        insert_job_sync(conn, ConfirmOrder(order_id=order_id, note="lamp"), queue="mail", priority=1)
        if not commit:
            tx.rollback()
    assert jobs(db_url) == ([("confirm_order", {"order_id": order_id, "note": "lamp"}, "available")] if commit else [])
    assert orders(db_url) == (1 if commit else 0)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
async def test_async_session_enqueue_follows_the_transaction(
    async_engine: AsyncEngine, db_url: str, commit: bool
) -> None:
    async with AsyncSession(async_engine) as session, session.begin() as tx:
        order = AppOrder(note="chair")
        session.add(order)
        await session.flush()
        order_id = order.id
        job = await insert_job(session, ConfirmOrder(order_id=order_id, note="chair"), tags=["web"])
        assert job.tags == ["web"]
        assert jobs(db_url) == []
        if not commit:
            await tx.rollback()
    assert jobs(db_url) == ([("confirm_order", {"order_id": order_id, "note": "chair"}, "available")] if commit else [])
    assert orders(db_url) == (1 if commit else 0)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
async def test_async_connection_enqueue_follows_the_transaction(
    async_engine: AsyncEngine, db_url: str, commit: bool
) -> None:
    async with async_engine.connect() as conn, conn.begin() as tx:
        result = await conn.execute(insert(AppOrder).values(note="desk").returning(AppOrder.id))
        order_id = result.scalar_one()
        await insert_job(conn, ConfirmOrder(order_id=order_id, note="desk"))
        if not commit:
            await tx.rollback()
    assert jobs(db_url) == ([("confirm_order", {"order_id": order_id, "note": "desk"}, "available")] if commit else [])
    assert orders(db_url) == (1 if commit else 0)


async def test_rolled_back_savepoint_removes_only_its_job(async_engine: AsyncEngine, db_url: str) -> None:
    async with AsyncSession(async_engine) as session, session.begin():
        await insert_job(session, {"n": 1}, kind="kept")
        async with session.begin_nested() as nested:
            await insert_job(session, {"n": 2}, kind="dropped")
            await nested.rollback()
    assert [kind for kind, _, _ in jobs(db_url)] == ["kept"]


async def test_unique_conflict_in_a_savepoint_leaves_the_transaction_usable(
    async_engine: AsyncEngine, db_url: str
) -> None:
    async with AsyncSession(async_engine) as session, session.begin():
        first = await insert_job(session, {"report": 7}, kind="daily_report", unique=True)
        with pytest.raises(UniqueConflict) as caught:
            async with session.begin_nested():
                await insert_job(session, {"report": 7}, kind="daily_report", unique=True)
        assert caught.value.unique_key == first.unique_key
        session.add(AppOrder(note="still fine"))
    assert len(jobs(db_url)) == 1 and orders(db_url) == 1


def test_insert_many_sync_commits_and_rolls_back(sync_engine: Engine, db_url: str) -> None:
    with Session(sync_engine) as session:
        with session.begin():
            result = insert_many_sync(session, [ConfirmOrder(order_id=i, note="bulk") for i in range(5)])
            assert result == awa_sqlalchemy.InsertManyResult(inserted=5, skipped_duplicates=0)
        with session.begin() as tx:
            insert_many_sync(session, [ConfirmOrder(order_id=i, note="gone") for i in range(3)])
            tx.rollback()
    assert len(jobs(db_url)) == 5


def test_insert_many_writes_the_same_rows_on_every_sync_dialect(db_url: str) -> None:
    """psycopg2 has no row writer for COPY: its rows are encoded as COPY text by hand, so values that
    text must escape (tabs, newlines, backslashes, quotes, commas and braces in tags, NUL-free
    unicode, bytes of a unique key, timestamps) must arrive as psycopg 3 sends them."""
    hostile = 'tab\there\nnew line\\back\\slash "quoted" {brace}, comma \r é 漢'
    tags = ["plain", 'with "quote"', "with,comma", "with\\backslash", "{brace}", "tab\tnl\n", "NULL", ""]
    run_at = datetime(2030, 1, 2, 3, 4, 5, 678901).astimezone()
    # A plain job takes its run_at from now() on the server: not compared.
    select = (
        "SELECT kind, queue, args, state::text, priority, max_attempts,"
        " CASE WHEN kind = 'plain_kind' THEN NULL ELSE run_at END, metadata, tags, unique_key, unique_states"
        " FROM awa.jobs ORDER BY id"
    )
    written = {}
    for dialect in SYNC_DIALECTS:
        engine = create_engine(with_driver(db_url, dialect))
        with Session(engine) as session, session.begin():
            batch = [ConfirmOrder(order_id=i, note=f"{hostile} {i}") for i in range(3)]
            result = insert_many_sync(
                session,
                batch,
                queue="bulk",
                tags=tags,
                run_at=run_at,
                priority=3,
                metadata={"note": hostile},
                unique={"by_args": True},
            )
            assert result.inserted == 3
            plain = insert_many_sync(session, [{"note": hostile}], kind="plain_kind", queue="bulk")
            assert plain.inserted == 1
        engine.dispose()
        with psycopg.connect(db_url, autocommit=True) as conn:
            written[dialect] = conn.execute(select).fetchall()
            conn.execute("DELETE FROM awa.jobs")  # the next dialect writes the same unique keys
    assert written["psycopg2"] == written["psycopg"]
    first = written["psycopg"][0]
    assert first[2]["note"] == f"{hostile} 0" and first[8] == tags and first[6] == run_at
    assert first[9] is not None and written["psycopg"][3][9] is None  # a unique key; the plain job has none


async def test_insert_many_async_skips_unique_duplicates(async_engine: AsyncEngine, db_url: str) -> None:
    async with AsyncSession(async_engine) as session:
        async with session.begin():
            result = await insert_many(session, [{"day": d} for d in (1, 2, 2, 3)], kind="report", unique=True)
            assert result == awa_sqlalchemy.InsertManyResult(inserted=3, skipped_duplicates=1)
        async with session.begin() as tx:
            await insert_many(session, [{"day": 9}], kind="report")
            await tx.rollback()
    assert sorted(args["day"] for _, args, _ in jobs(db_url)) == [1, 2, 3]


def test_flush_ordering(sync_engine: Engine, db_url: str) -> None:
    """The documented rule: a pending row has its id only after a flush, so flush before building args.

    Enqueueing runs a Core statement on the Session, which SQLAlchemy's
    autoflush (on by default) precedes with a flush of pending rows; with
    autoflush off they are flushed at commit. Either way they commit together.
    """
    with Session(sync_engine) as session, session.begin():
        order = AppOrder(note="pending")
        session.add(order)
        args_before_flush = ConfirmOrder(order_id=order.id, note="too early")
        assert args_before_flush.order_id is None, "no id before a flush: flush first"
        session.flush()
        assert order.id is not None
        order_id = order.id
        job = insert_job_sync(session, ConfirmOrder(order_id=order_id, note="pending"))

        autoflushed = AppOrder(note="autoflushed")
        session.add(autoflushed)
        insert_job_sync(session, {"x": 1}, kind="unrelated")
        assert autoflushed.id is not None, "autoflush sent the pending row before the job's statement"

        with session.no_autoflush:
            deferred = AppOrder(note="flushed at commit")
            session.add(deferred)
            insert_job_sync(session, {"x": 2}, kind="unrelated")
            assert deferred.id is None
    with Session(sync_engine) as session:
        stored = session.get(Job, job.id)
        assert stored is not None and stored.args["order_id"] == order_id
        notes = set(session.scalars(select(AppOrder.note)))
    assert notes == {"pending", "autoflushed", "flushed at commit"}
    assert len(jobs(db_url)) == 3


def test_scoped_sessions_are_resolved(sync_engine: Engine, db_url: str) -> None:
    registry = scoped_session(sessionmaker(sync_engine))
    try:
        insert_job_sync(registry, {"via": "scoped"}, kind="scoped")
        registry.commit()
    finally:
        registry.remove()
    assert jobs(db_url) == [("scoped", {"via": "scoped"}, "available")]


async def test_async_scoped_sessions_are_resolved(db_url: str) -> None:
    import asyncio

    from sqlalchemy.ext.asyncio import async_sessionmaker

    engine = create_async_engine(with_driver(db_url, "asyncpg"))
    registry = async_scoped_session(async_sessionmaker(engine), scopefunc=asyncio.current_task)
    try:
        await insert_job(registry, {"via": "async scoped"}, kind="scoped")
        await registry.commit()
    finally:
        await registry.remove()
        await engine.dispose()
    assert jobs(db_url) == [("scoped", {"via": "async scoped"}, "available")]


def test_insert_job_on_a_sync_session_writes_the_job_and_returns_it(sync_engine: Engine, db_url: str) -> None:
    """The ORM form: ``insert_job(session, args)`` with a plain sync Session, no await (issue 10)."""
    with Session(sync_engine) as session, session.begin():
        job = insert_job(session, {"n": 1}, kind="sync_form")
        result = insert_many(session, [{"n": 2}, {"n": 3}], kind="sync_form")
    assert isinstance(job, awa_bridge.Job) and job.id > 0
    assert result == awa_bridge.InsertManyResult(inserted=2, skipped_duplicates=0)
    assert [kind for kind, _, _ in jobs(db_url)] == ["sync_form"] * 3


async def test_wrong_session_kind_gets_a_clear_error(sync_engine: Engine, async_engine: AsyncEngine) -> None:
    async with AsyncSession(async_engine) as asession:
        with pytest.raises(UnsupportedConnection, match=r"needs a sync one: await the async API"):
            insert_job_sync(asession, {}, kind="k")
        with pytest.raises(UnsupportedConnection, match=r"needs a sync one: await the async API"):
            insert_many_sync(asession, [{}], kind="k")
    for call in (insert_job, insert_job_sync):
        with pytest.raises(UnsupportedConnection, match="needs a SQLAlchemy Session, Connection"):
            call(object(), {}, kind="k")  # type: ignore[call-overload, arg-type]
    assert isinstance(UnsupportedConnection("x"), TypeError)


# -- the models -------------------------------------------------------------------------------


def set_state(url: str, job_id: int, state: str) -> None:
    """Fault injection: put a job in a state directly (the worker test below does it for real)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET state = %s::awa.job_state WHERE id = %s", (state, job_id))


def seed_states(url: str) -> dict[str, int]:
    ids: dict[str, int] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for state in ("available", "failed", "failed", "completed", "waiting_external"):
            job = awa_bridge.insert_job_sync(conn, {"s": state}, kind="seeded")
            set_state(url, job.id, state)
            ids.setdefault(state, job.id)
    return ids


def test_enum_mapping_sync(sync_engine: Engine, db_url: str) -> None:
    seed_states(db_url)
    with Session(sync_engine) as session:
        failed = session.scalars(select(Job).where(Job.state == JobState.failed).order_by(Job.id)).all()
        assert [job.state for job in failed] == [JobState.failed, JobState.failed]
        assert all(type(job.state) is JobState for job in failed)
        counts = dict(session.execute(select(Job.state, func.count()).group_by(Job.state)).all())
        assert counts == {
            JobState.available: 1,
            JobState.failed: 2,
            JobState.completed: 1,
            JobState.waiting_external: 1,
        }
        waiting = session.scalars(select(Job.id).where(Job.state.in_([JobState.waiting_external]))).all()
        assert len(waiting) == 1
        # A plain string that is a label works too; a wrong label fails before reaching PostgreSQL.
        assert len(session.scalars(select(Job).where(Job.state == "failed")).all()) == 2
        with pytest.raises(StatementError, match="'exploded' is not among the defined enum values"):
            session.scalars(select(Job).where(Job.state == "exploded")).all()


async def test_enum_mapping_async(async_engine: AsyncEngine, db_url: str) -> None:
    seed_states(db_url)
    async with AsyncSession(async_engine) as session:
        failed = (await session.scalars(select(Job).where(Job.state == JobState.failed))).all()
        assert len(failed) == 2 and {job.state for job in failed} == {JobState.failed}
        job = (await session.scalars(select(Job).where(Job.state == JobState.available))).one()
        assert job.args == {"s": "available"} and job.metadata_ == {} and job.tags == [] and job.errors == []


async def test_reads_jobs_written_by_the_worker(db_url: str) -> None:
    """An in-process worker runs jobs; a plain Session reads the outcome through the models."""
    # Default timings: the test's tight FAST rescue window could rescue (and re-run) a job on a
    # loaded machine, and this test is about reading a normal outcome.
    client = Client(db_url)

    @client.task(ConfirmOrder)
    async def confirm(job: Any) -> None:
        job.set_progress(100, "sent")

    @client.task("refuse_order")
    def refuse(job: Any) -> None:
        raise TerminalError(f"order {job.args['order_id']} is on hold")

    with psycopg.connect(db_url, autocommit=True) as conn:
        ok = awa_bridge.insert_job_sync(conn, ConfirmOrder(order_id=41, note="ok"), metadata={"source": "test"})
        bad = awa_bridge.insert_job_sync(conn, {"order_id": 42}, kind="refuse_order", tags=["vip"])
    engine = create_engine(with_driver(db_url, "psycopg"))
    try:
        await client.start(["default:2"])

        def finished() -> bool:
            with Session(engine) as session:
                done = session.scalars(select(Job.state).where(Job.id.in_([ok.id, bad.id]))).all()
            return set(done) <= {JobState.completed, JobState.failed} and len(done) == 2

        await wait_until(finished)
        with Session(engine) as session:
            completed = session.get(Job, ok.id)
            failed = session.get(Job, bad.id)
            assert completed is not None and failed is not None
            assert completed.state is JobState.completed
            assert completed.args == {"order_id": 41, "note": "ok"} and isinstance(completed.args, dict)
            assert completed.metadata_ == {"source": "test"}
            assert completed.progress["percent"] == 100 and completed.progress["message"] == "sent"
            assert completed.errors == [] and completed.attempt == 1 and completed.run_lease >= 1
            assert isinstance(completed.finalized_at, datetime) and completed.finalized_at.tzinfo is not None
            assert failed.state is JobState.failed and failed.tags == ["vip"]
            assert len(failed.errors) == 1
            error = failed.errors[0]
            assert error["error"] == "order 42 is on hold" and error["type"] == "TerminalError"
            assert error["attempt"] == 1 and "Traceback" in error["traceback"]
            report = dict(
                session.execute(
                    select(Job.kind, func.count()).where(Job.state == JobState.failed).group_by(Job.kind)
                ).all()
            )
            assert report == {"refuse_order": 1}
    finally:
        await client.shutdown(timeout=2)
        engine.dispose()


def test_queue_meta_and_cron_job_models(sync_engine: Engine, db_url: str) -> None:
    from awa_bridge.admin import pause_queue

    pause_queue(db_url, "emails", paused_by="ops")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.cron_jobs (name, cron_expr, timezone, kind, args, tags, metadata) "
            "VALUES ('nightly', '0 3 * * *', 'Europe/Paris', 'nightly_report', '{\"full\": true}', "
            "'{ops}', '{\"owner\": \"bi\"}')"
        )
    with Session(sync_engine) as session:
        queue = session.get(QueueMeta, "emails")
        assert queue is not None and queue.paused is True and queue.paused_by == "ops"
        assert isinstance(queue.paused_at, datetime)
        cron = session.scalars(select(CronJob).where(CronJob.kind == "nightly_report")).one()
        assert (cron.name, cron.cron_expr, cron.timezone, cron.queue) == (
            "nightly",
            "0 3 * * *",
            "Europe/Paris",
            "default",
        )
        assert cron.args == {"full": True} and cron.tags == ["ops"] and cron.metadata_ == {"owner": "bi"}
        assert cron.missed_fire_policy == "coalesce" and cron.priority == 2 and cron.max_attempts == 25
        assert cron.last_enqueued_at is None and cron.created_at.tzinfo is not None


def test_unique_key_and_bytes_columns_round_trip(sync_engine: Engine, db_url: str) -> None:
    with Session(sync_engine) as session, session.begin():
        job = insert_job_sync(session, {"to": "a@b.com", "subject": "Hi"}, kind="send_email", unique=True)
    with Session(sync_engine) as session:
        stored = session.get(Job, job.id)
        assert stored is not None
        assert stored.unique_key == job.unique_key and isinstance(stored.unique_key, bytes)
        assert stored.unique_key.hex() == "917d72099c79c6dd28577111373d14be"
        assert stored.unique_states == "11111000"
        assert stored.callback_id is None and stored.progress is None


# -- the mapping matches the migrated schema; create_all never touches it ---------------------

_COLUMNS = """
SELECT c.column_name, c.is_nullable = 'YES', c.column_default IS NOT NULL OR c.is_identity = 'YES',
       format_type(a.atttypid, a.atttypmod)
FROM information_schema.columns c
JOIN pg_attribute a ON a.attrelid = format('%%I.%%I', c.table_schema, c.table_name)::regclass
                   AND a.attname = c.column_name
WHERE c.table_schema = 'awa' AND c.table_name = %s
ORDER BY c.ordinal_position
"""

_PRIMARY_KEY = """
SELECT k.column_name FROM information_schema.table_constraints t
JOIN information_schema.key_column_usage k USING (constraint_schema, constraint_name)
WHERE t.table_schema = 'awa' AND t.table_name = %s AND t.constraint_type = 'PRIMARY KEY'
"""


@pytest.mark.parametrize("model", [Job, QueueMeta, CronJob], ids=lambda m: m.__name__)
def test_model_matches_the_migrated_table(model: type[AwaBase], db_url: str) -> None:
    """Every column, its type, nullability, default and the primary key, against information_schema."""
    table = model.__table__
    dialect = postgresql.dialect()
    with psycopg.connect(db_url, autocommit=True) as conn:
        database = {
            name: (nullable, has_default, sql_type)
            for name, nullable, has_default, sql_type in conn.execute(_COLUMNS, (table.name,)).fetchall()
        }
        primary_key = {row[0] for row in conn.execute(_PRIMARY_KEY, (table.name,)).fetchall()}
        labels = conn.execute("SELECT enum_range(NULL::awa.job_state)::text[]").fetchone()[0]
    mapped = {
        column.name: (
            column.nullable,
            column.server_default is not None or column.identity is not None,
            column.type.compile(dialect=dialect).lower(),
        )
        for column in table.columns
    }
    assert table.schema == "awa"
    assert mapped == database
    assert {column.name for column in table.primary_key.columns} == primary_key
    assert labels == [state.value for state in JobState] == list(awa_sqlalchemy.job_state_type.enums)


def test_awa_tables_live_on_their_own_metadata() -> None:
    assert set(AwaBase.metadata.tables) == {"awa.jobs", "awa.queue_meta", "awa.cron_jobs"}
    assert not set(AwaBase.metadata.tables) & set(AppBase.metadata.tables)
    assert AwaBase.metadata is not AppBase.metadata and AwaBase.metadata.schema == "awa"


def test_application_create_all_and_drop_all_leave_awa_alone(db_url: str, make_database: Any) -> None:
    class Base(DeclarativeBase):
        pass

    class Customer(Base):
        __tablename__ = "customers"
        id: Mapped[int] = mapped_column(primary_key=True)
        name: Mapped[str] = mapped_column(Text)

    class Invoice(Base):
        __tablename__ = "invoices"
        id: Mapped[int] = mapped_column(primary_key=True)
        customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id"))
        job_id: Mapped[int | None]  # refers to awa.jobs by value, not by foreign key

    with psycopg.connect(db_url, autocommit=True) as conn:
        awa_bridge.insert_job_sync(conn, {"keep": True}, kind="survivor")
    empty_url = make_database()
    for url in (db_url, empty_url):
        engine = create_engine(with_driver(url, "psycopg"))
        statements: list[str] = []
        event.listen(engine, "before_cursor_execute", lambda *a, seen=statements: seen.append(a[2]))
        try:
            Base.metadata.create_all(engine)
            Base.metadata.drop_all(engine)
            Base.metadata.create_all(engine)
            with engine.connect() as conn:
                awa_schema = conn.execute(text("SELECT to_regnamespace('awa') IS NOT NULL")).scalar_one()
                tables = set(
                    conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).scalars()
                )
            Base.metadata.drop_all(engine)
        finally:
            engine.dispose()
        assert {"customers", "invoices"} <= tables
        assert not [s for s in statements if "awa." in s or "job_state" in s], statements
        assert awa_schema is (url == db_url), "create_all must neither create nor drop the awa schema"
    assert jobs(db_url) == [("survivor", {"keep": True}, "available")]
