"""One suite, every supported connection type (docs/reliability.md R7, R22, R28).

Each test opens the connection the way an application would, writes an
application row and enqueues in the same transaction, and checks the outcome
from an independent connection.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import awa_bridge
from awa_bridge import JobState, UniqueConflict
from awa_bridge.args import MAX_JSON_BYTES

from .conftest import count_rows
from .drivers import HANDLES, Handle


@dataclass
class SendEmail:
    to: str
    subject: str


def committed_jobs(url: str) -> int:
    return count_rows(url)


def committed_orders(url: str) -> int:
    return count_rows(url, "SELECT count(*) FROM app_orders")


async def test_commit_keeps_job_and_app_row(handle: Handle, db_url: str) -> None:
    await handle.begin()
    await handle.app_row("order 1")
    job = await handle.insert(SendEmail(to="a@b.com", subject="Hi"))
    assert job.state is JobState.available
    assert committed_jobs(db_url) == 0, "the job must not be visible before commit"
    await handle.commit()
    assert committed_jobs(db_url) == 1
    assert committed_orders(db_url) == 1


async def test_rollback_removes_job_and_app_row(handle: Handle, db_url: str) -> None:
    await handle.begin()
    await handle.app_row("order 1")
    await handle.insert(SendEmail(to="a@b.com", subject="Hi"))
    await handle.rollback()
    assert committed_jobs(db_url) == 0
    assert committed_orders(db_url) == 0


async def test_rolled_back_savepoint_removes_only_its_job(handle: Handle, db_url: str) -> None:
    await handle.begin()
    await handle.app_row("order 1")
    kept = await handle.insert(SendEmail(to="kept@b.com", subject="Hi"))
    async with handle.savepoint_rolled_back():
        await handle.insert(SendEmail(to="dropped@b.com", subject="Hi"))
    await handle.commit()
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT id, args->>'to' FROM awa.jobs").fetchall()
    assert rows == [(kept.id, "kept@b.com")]
    assert committed_orders(db_url) == 1


async def test_unique_conflict_carries_the_key(handle: Handle, db_url: str) -> None:
    await handle.begin()
    first = await handle.insert(SendEmail(to="a@b.com", subject="Hi"), unique=True)
    await handle.commit()
    assert first.unique_key is not None
    assert first.unique_key.hex() == "917d72099c79c6dd28577111373d14be"
    await handle.begin()
    with pytest.raises(UniqueConflict) as info:
        await handle.insert(SendEmail(to="a@b.com", subject="Hi"), unique=True)
    await handle.rollback()
    assert info.value.unique_key == first.unique_key
    assert info.value.constraint == "jobs_unique_key_idx"
    # One line on every driver (SQLAlchemy's wrapper once put its SQL and parameters in it); the
    # driver's own error is the cause.
    assert str(info.value) == (
        "a job with unique key 917d72099c79c6dd28577111373d14be already exists (constraint jobs_unique_key_idx): "
        "the job was not inserted; like any failed statement this aborts the transaction"
    )
    assert info.value.__cause__ is not None
    assert committed_jobs(db_url) == 1


async def test_scheduled_run_at_and_round_trip(handle: Handle, db_url: str) -> None:
    run_at = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    await handle.begin()
    job = await handle.insert(
        {"n": 1},
        kind="report",
        queue="reports",
        priority=1,
        max_attempts=3,
        run_at=run_at,
        metadata={"tenant": "acme"},
        tags=["a", "b"],
    )
    await handle.commit()
    assert committed_jobs(db_url) == 1, "one call, one row: the statement calls the function once"
    assert job.state is JobState.scheduled
    assert job.run_at == run_at
    assert (job.kind, job.queue, job.priority, job.max_attempts) == ("report", "reports", 1, 3)
    assert job.metadata == {"tenant": "acme"}
    assert job.tags == ["a", "b"]
    assert job.attempt == 0
    assert job.errors == []


async def test_the_returned_times_are_the_rows_times(handle: Handle, db_url: str) -> None:
    """The INSERTs read back ``created_at`` only and take ``run_at`` from the caller, or as
    ``created_at`` for a job available now (both at now()): on every driver the returned ``Job`` has
    the row's two times, in UTC whatever the driver's time zone, for a job available now (the
    three-parameter statement), a scheduled one, one with an ordering key and scheduled ones at both
    ends of the accepted range."""
    later = datetime.now(UTC) + timedelta(days=1)
    edges = [datetime(9999, 12, 29, 23, 59, 59, 999_999, tzinfo=UTC), datetime(1, 1, 2, 0, 0, 0, 1, tzinfo=UTC)]
    await handle.begin()
    jobs = [
        await handle.insert(SendEmail(to="now@b.com", subject="Hi")),
        await handle.insert(SendEmail(to="later@b.com", subject="Hi"), run_at=later),
        await handle.insert(SendEmail(to="ordered@b.com", subject="Hi"), ordering_key="k1"),
        *[await handle.insert(SendEmail(to="edge@b.com", subject="Hi"), run_at=edge) for edge in edges],
    ]
    await handle.commit()
    with psycopg.connect(db_url) as conn:
        rows = dict(
            (row[0], row[1:])
            for row in conn.execute(
                "SELECT id, run_at, created_at FROM awa.jobs WHERE id = ANY(%s)", ([j.id for j in jobs],)
            )
        )
    assert [(job.run_at, job.created_at) for job in jobs] == [rows[job.id] for job in jobs]
    assert jobs[0].created_at == jobs[0].run_at and jobs[1].run_at == later > jobs[1].created_at
    assert [job.run_at for job in jobs[3:]] == edges
    assert all(job.created_at.tzinfo is UTC and job.run_at.tzinfo is UTC for job in jobs)


async def test_ordering_key_commits_and_rolls_back_with_the_job(handle: Handle, db_url: str) -> None:
    """A job with an ordering key takes the third insert statement (through the contract's
    function, since awa.jobs has no column for the key): on every driver its key lands
    beside the job, as bytes, and a rolled-back savepoint takes both away."""
    await handle.begin()
    plain = await handle.insert(SendEmail(to="plain@b.com", subject="Hi"))
    ordered = await handle.insert(SendEmail(to="ordered@b.com", subject="Hi"), ordering_key="customer-7")
    async with handle.savepoint_rolled_back():
        await handle.insert(SendEmail(to="dropped@b.com", subject="Hi"), ordering_key=b"\x00\xffraw")
    await handle.commit()
    assert ordered.state is JobState.available
    assert ordered.args == {"to": "ordered@b.com", "subject": "Hi"}
    with psycopg.connect(db_url) as conn:
        keys = conn.execute("SELECT job_id, ordering_key FROM awa.job_ordering_keys").fetchall()
        ids = [row[0] for row in conn.execute("SELECT id FROM awa.jobs ORDER BY id").fetchall()]
    assert ids == [plain.id, ordered.id]
    assert keys == [(ordered.id, b"customer-7")]


PAYLOADS = {
    "unicode": {"text": 'héllo ✓ 日本語 \u2028 "quoted" \\ back', "emoji": "🎉"},
    "nested": {"a": [1, 2.5, {"b": [None, True, False, {"c": "d"}]}], "z": {"y": {"x": []}}},
    "empty": {},
    "large": {"blob": "x" * 100_000, "items": list(range(1000))},
    "numbers": {"small": 1.5e-5, "tiny": 1e-7, "big": 2**62, "neg": -3, "f": 0.1},
}


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
async def test_payload_fidelity(handle: Handle, db_url: str, payload: str) -> None:
    args = PAYLOADS[payload]
    expected = awa_bridge.prepare_job(args, kind="payload", unique=True)
    await handle.begin()
    job = await handle.insert(args, kind="payload", unique=True)
    await handle.commit()
    assert job.args == args
    assert job.unique_key == expected.unique_key, "unique keys must not depend on the driver"
    with psycopg.connect(db_url) as conn:
        stored = conn.execute("SELECT args FROM awa.jobs WHERE id = %s", (job.id,)).fetchone()[0]
    assert stored == json.loads(expected.args_json) == args


async def test_insert_many_commits_and_skips_duplicates(handle: Handle, db_url: str) -> None:
    await handle.begin()
    plain = await handle.insert_many([SendEmail(to=f"{i}@b.com", subject="x") for i in range(50)])
    assert (plain.inserted, plain.skipped_duplicates) == (50, 0)
    await handle.insert(SendEmail(to="dup@b.com", subject="x"), unique=True)
    unique = await handle.insert_many(
        [SendEmail(to=to, subject="x") for to in ("dup@b.com", "new@b.com", "new@b.com")],
        unique=True,
    )
    assert (unique.inserted, unique.skipped_duplicates) == (1, 2)
    await handle.commit()
    assert committed_jobs(db_url) == 52


async def test_insert_many_rows_take_the_defaults_or_their_options(handle: Handle, db_url: str) -> None:
    """A batch of plain jobs copies kind, queue and args only; one that turns non-plain midway
    (a PreparedJob with options after three plain jobs) writes the earlier rows in full. Either
    way each stored row is what ``insert_job`` of the same job stores."""
    special = awa_bridge.prepare_job(
        SendEmail(to="9", subject="x"), priority=1, max_attempts=3, metadata={"m": 1}, tags=["t"], queue="other"
    )
    await handle.begin()
    await handle.insert_many([SendEmail(to=str(i), subject="x") for i in range(3)])
    await handle.insert_many([*(SendEmail(to=str(i), subject="x") for i in range(3, 6)), special])
    await handle.commit()
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT (args->>'to')::int, state::text, priority, max_attempts, metadata, tags, queue,"
            " run_at = created_at, unique_key IS NULL FROM awa.jobs ORDER BY 1"
        ).fetchall()
    plain = [(i, "available", 2, 25, {}, [], "default") for i in range(6)]
    assert [row[:7] for row in rows] == [*plain, (9, "available", 1, 3, {"m": 1}, ["t"], "other")]
    assert all(row[8] for row in rows)
    assert all(row[7] for row in rows[:3]), "a plain batch's run_at is the table's now(), as created_at"


def test_a_plain_batch_copies_three_columns_and_a_mixed_one_all() -> None:
    from awa_bridge.enqueue import _bulk_rows

    plain = _bulk_rows([SendEmail(to="1", subject="x"), SendEmail(to="2", subject="x")], {})
    assert plain.columns == ("kind", "queue", "args")
    assert [row[2] for row in plain.rows] == ['{"subject":"x","to":"1"}', '{"subject":"x","to":"2"}']
    scheduled = awa_bridge.prepare_job(SendEmail(to="3", subject="x"), run_at="2030-01-01T00:00:00Z")
    mixed = _bulk_rows([SendEmail(to="1", subject="x"), scheduled, SendEmail(to="2", subject="x")], {})
    assert len(mixed.columns) == 11 and all(len(row) == 11 for row in mixed.rows)
    assert [row[3] for row in mixed.rows] == ["available", "scheduled", "available"]
    assert mixed.rows[0][6] == mixed.rows[2][6], "rows without run_at share one timestamp per call"
    assert [row[4:6] for row in mixed.rows] == [(2, 25)] * 3


async def test_insert_many_rolls_back(handle: Handle, db_url: str) -> None:
    await handle.begin()
    await handle.insert_many([{"i": i} for i in range(10)], kind="bulk", unique=True)
    await handle.rollback()
    assert committed_jobs(db_url) == 0


async def test_args_past_the_size_limit_are_refused_before_the_server(handle: Handle, db_url: str) -> None:
    """A 17 MiB payload once reached PostgreSQL (whose own limit is 256 MiB of jsonb) and failed
    there only past that, aborting the caller's transaction; now every driver refuses it first."""
    big = {"blob": "x" * (MAX_JSON_BYTES + 1)}
    await handle.begin()
    await handle.app_row("before")
    with pytest.raises(awa_bridge.ValidationError, match=r"^args: is 16,777,22\d bytes of JSON; the limit is 16,7"):
        await handle.insert(big, kind="big")
    with pytest.raises(awa_bridge.ValidationError, match=r"^jobs\[1\]\.args: .* the limit is 16,777,216"):
        await handle.insert_many([{"i": 1}, big], kind="big")
    await handle.app_row("after")  # the transaction is still usable
    await handle.insert({"blob": "x" * (MAX_JSON_BYTES - len('{"blob":""}'))}, kind="big")  # exactly the limit
    await handle.commit()
    assert committed_jobs(db_url) == 1
    assert committed_orders(db_url) == 2


def test_wrong_connection_type_lists_the_supported_ones() -> None:
    with pytest.raises(TypeError) as info:
        awa_bridge.insert_job_sync(object(), {"a": 1}, kind="k")
    message = str(info.value)
    for name in ("asyncpg", "psycopg", "SQLAlchemy", "Session", "AsyncSession", "Django"):
        assert name in message
    assert isinstance(info.value, awa_bridge.UnsupportedConnection)


async def test_one_name_for_sync_and_async_connections(db_url: str) -> None:
    """``insert_job`` runs at once on a sync connection and returns an awaitable on an async one.

    Awaiting the sync form is a loud TypeError (not a dropped job), and the
    ``_sync`` alias refuses an async connection with a hint.
    """
    with psycopg.connect(db_url) as conn:
        job = awa_bridge.insert_job(conn, {"a": 1}, kind="k")
        assert isinstance(job, awa_bridge.Job)
        result = awa_bridge.insert_many(conn, [{"a": 2}], kind="k")
        assert isinstance(result, awa_bridge.InsertManyResult)
        conn.commit()
    assert committed_jobs(db_url) == 2
    with pytest.raises(TypeError, match="await"), psycopg.connect(db_url) as conn:
        await awa_bridge.insert_job(conn, {"a": 3}, kind="k")  # type: ignore[misc]
    assert committed_jobs(db_url) == 2  # the error left the block, which rolled back
    async with await psycopg.AsyncConnection.connect(db_url) as aconn:
        pending = awa_bridge.insert_job(aconn, {"a": 4}, kind="k")
        assert inspect.iscoroutine(pending)
        await pending
        with pytest.raises(TypeError, match="async connection, and this call needs a sync one: await the async API"):
            awa_bridge.insert_job_sync(aconn, {"a": 5}, kind="k")  # type: ignore[arg-type]
        await aconn.commit()
    assert committed_jobs(db_url) == 3


def test_bad_input_on_an_async_connection_raises_at_the_call(db_url: str) -> None:
    """Validation happens before the awaitable exists: nothing to await, nothing written."""

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(db_url) as aconn:
            with pytest.raises(awa_bridge.ValidationError, match="priority"):
                awa_bridge.insert_job(aconn, {"a": 1}, kind="k", priority=9)

    asyncio.run(main())
    assert committed_jobs(db_url) == 0


def test_unique_insert_under_contention(db_url: str) -> None:
    """R7: ten producers over every sync and async driver insert the same key at once."""
    names = [
        "asyncpg",
        "asyncpg-pool",
        "psycopg",
        "psycopg-async",
        "sqlalchemy-connection",
        "sqlalchemy-session",
        "sqlalchemy-async-session-asyncpg",
        "sqlalchemy-async-connection-psycopg",
        "sqlalchemy-session-psycopg2",
        "asyncpg",
    ]
    barrier = threading.Barrier(len(names))
    outcomes: list[object] = []
    lock = threading.Lock()

    def producer(name: str) -> None:
        async def run() -> object:
            h = HANDLES[name]()
            await h.open(db_url)
            try:
                await h.begin()
                barrier.wait(timeout=30)
                try:
                    job = await h.insert({"order": 42}, kind="charge", unique=True)
                    await h.commit()
                    return job.id
                except UniqueConflict as exc:
                    await h.rollback()
                    return exc
            finally:
                await h.close()

        result = asyncio.run(run())
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=producer, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    winners = [o for o in outcomes if isinstance(o, int)]
    conflicts = [o for o in outcomes if isinstance(o, UniqueConflict)]
    assert len(outcomes) == len(names)
    assert len(winners) == 1
    assert len(conflicts) == len(names) - 1
    assert all(c.constraint == "jobs_unique_key_idx" for c in conflicts)
    assert committed_jobs(db_url) == 1


async def test_unique_states_mask_allows_reinsert_after_leaving_enforced_state(db_url: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(db_url)
    try:
        first = await awa_bridge.insert_job(conn, {"a": 1}, kind="k", unique={"states": ["available"]})
        assert first.unique_states == "01000000"
        await conn.execute("UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE id = $1", first.id)
        again = await awa_bridge.insert_job(conn, {"a": 1}, kind="k", unique={"states": ["available"]})
        assert again.id != first.id
        with pytest.raises(UniqueConflict):
            await awa_bridge.insert_job(conn, {"a": 1}, kind="k", unique={"states": ["available"]})
    finally:
        await conn.close()


async def test_naive_and_iso_run_at_are_utc(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        naive = awa_bridge.insert_job_sync(conn, {}, kind="k", run_at=datetime(2030, 1, 1, 12, 0))
        iso = awa_bridge.insert_job_sync(conn, {}, kind="k", run_at="2030-01-01T12:00:00+02:00")
        conn.commit()
    assert naive.run_at == datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    assert iso.run_at == datetime(2030, 1, 1, 10, 0, tzinfo=UTC)
    assert naive.run_at - iso.run_at == timedelta(hours=2)


def test_django_connection_proxy_and_alias(db_url: str, django_setup: None) -> None:
    """``django.db.connection`` (the proxy) and ``connections[alias]`` both work in atomic()."""
    from django.db import connection, connections, transaction

    with transaction.atomic():
        awa_bridge.insert_job_sync(connection, {"via": "proxy"}, kind="k")
        awa_bridge.insert_job_sync(connections["default"], {"via": "alias"}, kind="k")
    with transaction.atomic():
        awa_bridge.insert_job_sync(connection, {"via": "rolled back"}, kind="k")
        transaction.set_rollback(True)
    connection.close()
    with psycopg.connect(db_url) as conn:
        vias = sorted(r[0] for r in conn.execute("SELECT args->>'via' FROM awa.jobs"))
    assert vias == ["alias", "proxy"]


async def test_unique_bulk_staging_table_is_always_the_temporary_one(db_url: str) -> None:
    """A table named like the staging table earlier on the search_path must not receive the rows."""
    import asyncpg
    import psycopg

    stage_columns = (
        "kind text, queue text, args jsonb, state awa.job_state, priority smallint, max_attempts smallint, "
        "run_at timestamptz, metadata jsonb, tags text[], unique_key bytea, unique_states text"
    )
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS trap CASCADE")
        conn.execute("CREATE SCHEMA trap")
        # Any row reaching it fails the insert (and the test).
        conn.execute(f"CREATE TABLE trap.awa_insert_stage ({stage_columns}, CHECK (kind IS NULL))")
    try:
        with psycopg.connect(db_url) as conn:
            conn.execute("SET search_path TO trap, pg_temp, public")
            first = awa_bridge.insert_many_sync(conn, [{"n": 1}, {"n": 1}, {"n": 2}], kind="staged", unique=True)
            conn.commit()
        aconn = await asyncpg.connect(db_url, server_settings={"search_path": "trap, pg_temp, public"})
        try:
            async with aconn.transaction():
                second = await awa_bridge.insert_many(aconn, [{"n": 2}, {"n": 3}], kind="staged", unique=True)
        finally:
            await aconn.close()
        assert (first.inserted, first.skipped_duplicates) == (2, 1)
        assert (second.inserted, second.skipped_duplicates) == (1, 1)
        with psycopg.connect(db_url, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM trap.awa_insert_stage").fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM awa.jobs WHERE kind = 'staged'").fetchone()[0] == 3
    finally:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("DROP SCHEMA trap CASCADE")


async def test_an_unmigrated_database_raises_schema_not_migrated(handle: Handle, db_url: str) -> None:
    """``insert_job`` / ``insert_many`` on a database without the awa schema raised the driver's own
    UndefinedTable; now ``SchemaNotMigrated`` (from it) saying to migrate, and the connection is
    usable after the rollback as with any failed statement."""
    from awa_bridge.errors import missing_schema

    calls = {
        "insert_job": lambda: handle.insert(SendEmail(to="a@b.com", subject="Hi")),
        "insert_job(unique)": lambda: handle.insert(SendEmail(to="a@b.com", subject="Hi"), unique=True),
        "insert_many": lambda: handle.insert_many([SendEmail(to="a@b.com", subject="Hi")]),
        "insert_many(unique)": lambda: handle.insert_many([SendEmail(to="a@b.com", subject="Hi")], unique=True),
    }
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("ALTER SCHEMA awa RENAME TO awa_hidden_by_test")
    try:
        for name, call in calls.items():
            await handle.begin()
            await handle.app_row(f"before {name}")
            with pytest.raises(awa_bridge.SchemaNotMigrated, match=r"python -m awa_bridge migrate") as info:
                await call()
            assert missing_schema(info.value.__cause__ or info.value) is not None, name
            assert info.value.__cause__ is not None, f"{name}: not raised from the driver's error"
            await handle.rollback()
            await handle.begin()
            await handle.app_row(f"after {name}")
            await handle.commit()
    finally:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("ALTER SCHEMA awa_hidden_by_test RENAME TO awa")
    assert committed_orders(db_url) == len(calls)
