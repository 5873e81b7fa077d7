"""Interop with the real Awa: ``awa-pg`` 0.6.9 from PyPI against our bridge.

A fresh database is migrated by awa-pg itself (never by us). On it:

* our migration runner refuses to touch the schema (``ForeignSchema``; the CLI
  exits 2 and names Awa);
* jobs enqueued through our bridge on asyncpg, psycopg (sync and async) and
  SQLAlchemy (sync ``Session`` on psycopg, ``AsyncSession`` on asyncpg) are run
  to ``completed`` by awa-pg's own worker, whose handler sees the exact args,
  and awa-pg's own insert of a duplicate of our unique job is refused;
* over random args, kinds, queues and unique options, the ``unique_key`` and
  ``unique_states`` awa-pg stores equal ``prepare_job``'s byte for byte.

Facts about awa-pg 0.6.9 these tests rely on (checked against the wheel):

* ``awa.migrate(url)`` must be awaited inside a running event loop.
* Its URL parser (sqlx) rejects an empty host (``postgresql://postgres:@/db?host=/tmp/x``,
  the embedded server's form: "empty host"); the socket directory percent-encoded
  as the host (``postgresql://postgres@%2Ftmp%2Fx/db``) works, see ``awa_pg_url``.
* ``unique_opts["states"]`` is an integer mask: bit ``1 << i`` is state ``i`` in
  enum order (scheduled=1, available=2, running=4, ..., waiting_external=128), so
  it lands in ``bit(8)`` with scheduled leftmost.
* ``awa.Client.insert`` is synchronous; ``awa.AsyncClient`` runs workers.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
import pytest

awa = pytest.importorskip("awa")

from hypothesis import HealthCheck, given, note, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import awa_bridge  # noqa: E402
from awa_bridge import insert_job, insert_job_sync, prepare_job  # noqa: E402
from awa_bridge.types import STATE_ORDER  # noqa: E402

from .dbutil import create_database, drop_database, with_driver  # noqa: E402

pytestmark = pytest.mark.interop

QUEUE = "interop"
WORKER_TIMEOUT = 30.0


def awa_pg_url(url: str) -> str:
    """A URL awa-pg (sqlx) accepts for the same database.

    A socket directory given as ``?host=/dir`` with an empty URL host becomes the
    percent-encoded host (``postgresql://user@%2Fdir/db``); other URLs pass through.
    """
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    socket_dir = next((value for key, value in query if key == "host" and value.startswith("/")), None)
    if socket_dir is None or parts.hostname:
        return url
    userinfo = quote(parts.username or "", safe="")
    if parts.password:
        userinfo += ":" + quote(parts.password, safe="")
    netloc = (userinfo + "@" if userinfo else "") + quote(socket_dir, safe="")
    if parts.port:
        netloc += f":{parts.port}"
    rest = urlencode([(key, value) for key, value in query if key != "host"])
    return urlunsplit(parts._replace(netloc=netloc, query=rest))


def test_awa_pg_url_forms() -> None:
    embedded = "postgresql://postgres:@/awa_tmp_1?host=/tmp/awa-pg-x/data"
    assert awa_pg_url(embedded) == "postgresql://postgres@%2Ftmp%2Fawa-pg-x%2Fdata/awa_tmp_1"
    tcp = "postgresql://postgres@127.0.0.1:5432/awa_tmp_1"
    assert awa_pg_url(tcp) == tcp


class AwaDatabase(NamedTuple):
    url: str  # for psycopg / asyncpg / SQLAlchemy and our migration runner
    awa_url: str  # the same database in a form awa-pg accepts


@pytest.fixture(scope="module")
def awa_migrated(server_url: str) -> Iterator[str]:
    """A database migrated by the real awa-pg, once for this file: each test gets a copy of it."""
    url = create_database(server_url, prefix="awa_tpl")

    async def run_awa_migrations() -> None:
        await awa.migrate(awa_pg_url(url))  # needs a running event loop

    asyncio.run(run_awa_migrations())
    yield url
    drop_database(server_url, url)


@pytest.fixture
def awa_db(make_database: Callable[..., str], awa_migrated: str) -> AwaDatabase:
    """A fresh database as awa-pg's migrations left it (a copy of ``awa_migrated``), dropped after the test."""
    url = make_database(template=awa_migrated)
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM awa.schema_version").fetchone()[0] > 0
    return AwaDatabase(url, awa_pg_url(url))


# -- our migration runner refuses Awa's schema ---------------------------------


def test_our_migrate_refuses_awa_database(awa_db: AwaDatabase) -> None:
    with pytest.raises(awa_bridge.ForeignSchema, match="Awa"):
        awa_bridge.migrate(awa_db.url)
    with pytest.raises(awa_bridge.ForeignSchema):
        awa_bridge.migrate(awa_db.url, dry_run=True)

    cli = subprocess.run(
        [sys.executable, "-m", "awa_bridge", "migrate", "--database-url", awa_db.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 2, cli
    assert "Awa" in cli.stderr

    with psycopg.connect(awa_db.url, autocommit=True) as conn:
        ledger = conn.execute("SELECT to_regclass('awa.bridge_migrations')").fetchone()[0]
    assert ledger is None, "the refused runner must not have created its ledger"


# -- our bridge enqueues, awa-pg's worker runs ---------------------------------


@dataclass
class InteropOrder:
    order_id: int
    sku: str
    amount: float
    lines: list[Any] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def _order(n: int, driver: str) -> InteropOrder:
    return InteropOrder(
        order_id=n,
        sku=f"{driver}-sku-ü✓",
        amount=n + 0.25,
        lines=[n, "two", None, True, 1.5e-5],
        extra={"driver": driver, "nested": {"big": 2**62 + n, "tiny": 1e-7}},
    )


async def _poll_until(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


async def _enqueue_everywhere(url: str) -> dict[int, InteropOrder]:
    """One committed job per connection type; returns id → args inserted."""
    import asyncpg
    from sqlalchemy import create_engine
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
    from sqlalchemy.orm import Session

    expected: dict[int, InteropOrder] = {}

    # asyncpg
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            args = _order(1, "asyncpg")
            expected[(await insert_job(conn, args, queue=QUEUE)).id] = args
    finally:
        await conn.close()

    # psycopg, sync
    with psycopg.connect(url) as sync_conn:
        args = _order(2, "psycopg")
        expected[insert_job_sync(sync_conn, args, queue=QUEUE).id] = args
        sync_conn.commit()

    # psycopg, async
    async with await psycopg.AsyncConnection.connect(url) as async_conn:
        args = _order(3, "psycopg-async")
        expected[(await insert_job(async_conn, args, queue=QUEUE)).id] = args
        await async_conn.commit()

    # SQLAlchemy Session on the psycopg dialect
    engine = create_engine(with_driver(url, "psycopg"))
    try:
        with Session(engine) as session:
            args = _order(4, "sqlalchemy-psycopg")
            expected[insert_job_sync(session, args, queue=QUEUE).id] = args
            session.commit()
    finally:
        engine.dispose()

    # SQLAlchemy AsyncSession on the asyncpg dialect
    async_engine = create_async_engine(with_driver(url, "asyncpg"))
    try:
        async with AsyncSession(async_engine) as async_session:
            args = _order(5, "sqlalchemy-asyncpg")
            expected[(await insert_job(async_session, args, queue=QUEUE)).id] = args
            await async_session.commit()
    finally:
        await async_engine.dispose()

    return expected


async def test_awa_worker_runs_jobs_enqueued_by_bridge(awa_db: AwaDatabase) -> None:
    expected = await _enqueue_everywhere(awa_db.url)

    unique_args = _order(6, "unique")
    with psycopg.connect(awa_db.url) as conn:
        unique_job = insert_job_sync(conn, unique_args, queue=QUEUE, unique=True)
        conn.commit()
    expected[unique_job.id] = unique_args
    assert unique_job.unique_key == prepare_job(unique_args, queue=QUEUE, unique=True).unique_key
    assert len(expected) == 6

    client = awa.AsyncClient(awa_db.awa_url)
    try:
        # awa-pg computes the same key for the same job, so its own insert is a duplicate.
        with pytest.raises(awa.UniqueConflict):
            await client.insert(unique_args, queue=QUEUE, unique_opts={})

        seen: dict[int, tuple[str, Any]] = {}

        @client.task(InteropOrder, queue=QUEUE)
        async def handle(job: Any) -> None:
            seen[job.id] = (job.kind, job.args)

        async def jobs_state() -> dict[int, str]:
            async with await psycopg.AsyncConnection.connect(awa_db.url, autocommit=True) as conn:
                cur = await conn.execute("SELECT id, state::text FROM awa.jobs WHERE queue = %s", (QUEUE,))
                return dict(await cur.fetchall())

        async def all_completed() -> bool:
            states = await jobs_state()
            return set(expected) <= set(states) and all(states[i] == "completed" for i in expected)

        await client.start([(QUEUE, 4)], poll_interval_ms=50)
        try:
            what = f"awa-pg's worker to complete jobs {sorted(expected)}"
            await _poll_until(all_completed, WORKER_TIMEOUT, what)
        finally:
            await client.shutdown()
    finally:
        await client.close()

    assert set(await jobs_state()) == set(expected)
    assert set(seen) == set(expected)
    for job_id, args in expected.items():
        kind, received = seen[job_id]
        assert kind == "interop_order"
        assert type(received) is InteropOrder
        assert received == args, f"job {job_id}: handler saw {received!r}, we inserted {args!r}"


async def test_bridge_inserts_on_awa_pg_queue_storage_are_run_by_awa_pg(awa_db: AwaDatabase) -> None:
    """``insert_job`` is a plain ``INSERT INTO awa.jobs``; with awa-pg's queue storage active that
    view's INSTEAD OF trigger hands the row to awa-pg's own ``insert_job_compat``. Jobs at every
    default, with every column, and with an ordering key (the function itself) come back with the
    ids awa-pg gave them, a duplicate unique job is refused, and awa-pg's worker runs the ones due."""
    from datetime import UTC, datetime, timedelta

    import asyncpg

    client = awa.AsyncClient(awa_db.awa_url)
    try:
        await client.install_queue_storage()
    finally:
        await client.close()

    expected: dict[int, InteropOrder] = {}
    conn = await asyncpg.connect(awa_db.url)
    try:
        async with conn.transaction():
            plain = _order(11, "asyncpg-plain")
            expected[(await insert_job(conn, plain, queue=QUEUE)).id] = plain
            full = _order(12, "asyncpg-full")
            job = await insert_job(conn, full, queue=QUEUE, priority=1, max_attempts=3, tags=["t"], unique=True)
            expected[job.id] = full
            ordered = _order(13, "asyncpg-ordered")
            expected[(await insert_job(conn, ordered, queue=QUEUE, ordering_key="k")).id] = ordered
        with pytest.raises(awa_bridge.UniqueConflict):
            await insert_job(conn, full, queue=QUEUE, priority=1, max_attempts=3, tags=["t"], unique=True)
    finally:
        await conn.close()
    with psycopg.connect(awa_db.url) as sync_conn:
        args = _order(14, "psycopg-plain")
        expected[insert_job_sync(sync_conn, args, queue=QUEUE).id] = args
        in_an_hour = datetime.now(UTC) + timedelta(hours=1)
        later = insert_job_sync(sync_conn, _order(15, "later"), queue=QUEUE, run_at=in_an_hour)
        sync_conn.commit()
        stored = dict(sync_conn.execute("SELECT id, state::text FROM awa.jobs").fetchall())
    assert stored == {**dict.fromkeys(expected, "available"), later.id: "scheduled"}

    worker = awa.AsyncClient(awa_db.awa_url)
    seen: dict[int, Any] = {}
    try:

        @worker.task(InteropOrder, queue=QUEUE)
        async def handle(job: Any) -> None:
            seen[job.id] = job.args

        async def all_seen() -> bool:
            return set(seen) >= set(expected)

        await worker.start([(QUEUE, 4)], poll_interval_ms=50)
        try:
            await _poll_until(all_seen, WORKER_TIMEOUT, f"awa-pg's worker to run jobs {sorted(expected)}")
        finally:
            await worker.shutdown()
    finally:
        await worker.close()
    assert seen == expected


# -- unique keys: awa-pg and prepare_job agree byte for byte --------------------

_I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

_NO_NUL_TEXT = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")

# Integers beyond int64 and floats above 1e308 are refused by prepare_job
# (awa-pg cannot read them back exactly, see awa_bridge.args), so the keys are
# compared over everything we accept.
_INTERESTING_INTS = st.sampled_from([0, -1, 2**53 + 1, 2**63 - 1, -(2**63), 2**62, -(2**62)])

_INTERESTING_FLOATS = st.sampled_from(
    [1.5e-5, -1.5e-5, 9.5e-5, 1e-5, 9.99e-6, 1e-4, 1e-7, 1.234e-10, 5e-324, -0.0, 0.1, 1e16, 1e21, 1e22]
)

_FLOATS = st.floats(min_value=-1e308, max_value=1e308)

_SCALARS = (
    st.none()
    | st.booleans()
    | _I64
    | _INTERESTING_INTS
    | _FLOATS
    | _INTERESTING_FLOATS
    | st.text(_NO_NUL_TEXT, max_size=20)
)
_KEYS = st.text(_NO_NUL_TEXT, max_size=10)
_JSON = st.recursive(
    _SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_KEYS, children, max_size=4),
    max_leaves=12,
)
_ARGS = st.dictionaries(_KEYS, _JSON, max_size=5)
_NAMES = st.text(st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=200)


@st.composite
def _unique_options(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same unique options twice: for awa-pg (integer ``states``) and for us.

    Each option may be left out, so the defaults are compared too. We get
    ``states`` either as names or in awa-pg's integer form.
    """
    awa_opts: dict[str, Any] = {}
    our_opts: dict[str, Any] = {}
    for flag in ("by_queue", "by_args"):
        if draw(st.booleans()):
            awa_opts[flag] = our_opts[flag] = draw(st.booleans())
    if draw(st.booleans()):
        awa_opts["by_period"] = our_opts["by_period"] = draw(_I64)
    if draw(st.booleans()):
        indexes = draw(st.sets(st.integers(0, 7), min_size=1))
        mask = sum(1 << i for i in indexes)
        awa_opts["states"] = mask
        our_opts["states"] = mask if draw(st.booleans()) else sorted(STATE_ORDER[i].value for i in indexes)
    return awa_opts, our_opts


@pytest.fixture
def awa_client(awa_db: AwaDatabase) -> Iterator[Any]:
    """awa-pg's synchronous producer client on the Awa-migrated database."""
    with awa.Client(awa_db.awa_url, max_connections=2) as client:
        yield client


@pytest.fixture
def reader(awa_db: AwaDatabase) -> Iterator[psycopg.Connection]:
    with psycopg.connect(awa_db.url, autocommit=True) as conn:
        yield conn


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(args=_ARGS, kind=_NAMES, queue=_NAMES, unique=_unique_options())
def test_unique_key_matches_awa_pg(
    awa_client: Any,
    reader: psycopg.Connection,
    args: dict[str, Any],
    kind: str,
    queue: str,
    unique: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    awa_opts, our_opts = unique
    ours = prepare_job(args, kind=kind, queue=queue, unique=our_opts)

    job = awa_client.insert(args, kind=kind, queue=queue, unique_opts=awa_opts)
    stored_key, stored_states, same_args = reader.execute(
        "SELECT unique_key, unique_states::text, args = %s::jsonb FROM awa.jobs WHERE id = %s",
        (ours.args_json, job.id),
    ).fetchone()
    # Remove it again so a replayed or shrunk example is not a duplicate.
    reader.execute("DELETE FROM awa.jobs WHERE id = %s", (job.id,))

    note(f"awa-pg unique_opts={awa_opts!r}; ours={our_opts!r}; our canonical args={ours.args_json}")
    note(f"awa-pg stored key={bytes(stored_key).hex()} states={stored_states}")
    assert ours.unique_key is not None
    awa_key = bytes(stored_key)
    assert awa_key == ours.unique_key, f"key: awa-pg {awa_key.hex()}, ours {ours.unique_key.hex()}"
    assert stored_states == ours.unique_states
    assert same_args, "awa-pg stored args that differ from our canonical JSON"


def test_awa_pg_integer_states_bit_order(awa_client: Any, reader: psycopg.Connection) -> None:
    """``1 << i`` is state ``i`` in enum order: the ``i``-th character of ``bit(8)``."""
    for i in range(8):
        job = awa_client.insert({"i": i}, kind="bit_order", unique_opts={"states": 1 << i})
        sql = "SELECT unique_states::text FROM awa.jobs WHERE id = %s"
        bits = reader.execute(sql, (job.id,)).fetchone()[0]
        assert bits == "".join("1" if j == i else "0" for j in range(8)), (i, bits)
        by_name = prepare_job({"i": i}, kind="bit_order", unique={"states": [STATE_ORDER[i].value]})
        by_mask = prepare_job({"i": i}, kind="bit_order", unique={"states": 1 << i})
        assert by_name.unique_states == by_mask.unique_states == bits


# -- kind derivation: awa-pg's own function is the reference -------------------

_IDENTIFIER_CHARS = st.characters(categories=("Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Nd", "Mn", "Mc", "Pc"))
_CLASS_NAMES = st.text(_IDENTIFIER_CHARS, min_size=1, max_size=16).filter(str.isidentifier)


@settings(max_examples=2000, deadline=None, database=None)
@given(name=st.one_of(_CLASS_NAMES, st.from_regex(r"\A[A-Za-z][A-Za-z0-9_]{0,12}\Z")))
def test_kind_derivation_matches_awa_pg(name: str) -> None:
    assert awa_bridge.args.derive_kind(name) == awa.derive_kind(name)


def test_kind_derivation_of_non_ascii_class_names() -> None:
    for name, kind in [
        ("CaféOrder", "café_order"),
        ("ÉtéJob", "été_job"),
        ("\u0391\u0392\u03b3", "\u03b1_\u03b2\u03b3"),
        ("SMTPEmail", "smtp_email"),
        # Lowercase since Unicode 15.0 (Python 3.11 follows 14.0): found by the property test above.
        ("AA\u10fc", "a_a\u10fc"),
        ("a\uab69B", "a\uab69_b"),
    ]:
        assert awa.derive_kind(name) == kind
        assert awa_bridge.args.derive_kind(name) == kind


# -- what cannot work on awa-pg's storage is refused up front -------------------


def test_our_worker_refuses_to_start_on_an_awa_pg_database(awa_db: AwaDatabase) -> None:
    import os

    env = {**os.environ, "DATABASE_URL": awa_db.url}
    cli = subprocess.run(
        [sys.executable, "-m", "awa_bridge", "worker", "tests.worker_app:client", "--queue", "default"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert cli.returncode == 2, cli
    assert cli.stderr.strip().count("\n") == 0, cli.stderr  # one line
    assert "awa-pg" in cli.stderr and "worker" in cli.stderr, cli.stderr


@pytest.mark.parametrize("flavour", ["psycopg", "asyncpg"])
async def test_unique_bulk_insert_is_refused_on_awa_pg_and_the_transaction_stays_usable(
    awa_db: AwaDatabase, flavour: str
) -> None:
    jobs = [{"n": 1}, {"n": 1}, {"n": 2}]
    if flavour == "psycopg":
        with psycopg.connect(awa_db.url) as conn:
            with pytest.raises(awa_bridge.ForeignSchema, match="insert_many"):
                awa_bridge.insert_many_sync(conn, jobs, kind="bulk_unique", unique=True)
            assert awa_bridge.insert_many_sync(conn, jobs, kind="bulk_plain").inserted == 3
            insert_job_sync(conn, {"n": 1}, kind="bulk_unique", unique=True)
            conn.commit()
    else:
        import asyncpg

        conn = await asyncpg.connect(awa_db.url)
        try:
            async with conn.transaction():
                with pytest.raises(awa_bridge.ForeignSchema, match="insert_many"):
                    await awa_bridge.insert_many(conn, jobs, kind="bulk_unique", unique=True)
                await insert_job(conn, {"n": 1}, kind="bulk_unique", unique=True)
        finally:
            await conn.close()
    with psycopg.connect(awa_db.url, autocommit=True) as conn:
        kinds = dict(conn.execute("SELECT kind, count(*) FROM awa.jobs GROUP BY kind").fetchall())
        # The plain batch copied kind, queue and args only; awa-pg's view filled in the rest.
        plain = conn.execute(
            "SELECT DISTINCT state::text, priority, max_attempts, run_at IS NOT NULL FROM awa.jobs"
            " WHERE kind = 'bulk_plain'"
        ).fetchall()
    assert kinds.get("bulk_unique") == 1
    assert plain == ([("available", 2, 25, True)] if flavour == "psycopg" else [])


def test_django_awa_worker_refuses_to_start_on_an_awa_pg_database(awa_db: AwaDatabase) -> None:
    import os
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "AWA_TEST_DATABASE_URL": awa_db.url, "PYTHONPATH": str(repo)}
    cli = subprocess.run(
        [sys.executable, "-m", "django", "awa_worker", "--settings", "tests.django.project.settings"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=repo,
    )
    assert cli.returncode == 1, cli
    assert "awa-pg" in cli.stderr and "worker" in cli.stderr, cli.stderr
    assert "Traceback" not in cli.stderr, cli.stderr


_ADMIN_ON_AWA_PG = """
import sys
import django
from django.conf import settings

settings.configure(
    DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": sys.argv[1], "USER": "postgres",
                           "HOST": sys.argv[2], "PORT": sys.argv[3]}},
    INSTALLED_APPS=["django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
                    "django.contrib.sessions", "django.contrib.messages", "awa_django"],
    ROOT_URLCONF="tests.django.project.urls", SECRET_KEY="x", USE_TZ=True,
)
django.setup()
from django.test import RequestFactory
from django.urls import resolve

class Operator:
    is_active = is_staff = is_superuser = is_authenticated = True
    pk = id = 1
    def has_perm(self, perm, obj=None): return True
    def has_perms(self, perms, obj=None): return True
    def has_module_perms(self, app): return True
    def get_username(self): return "op"

for method, path in [
    ("get", "/admin/awa_django/job/"),
    ("get", "/admin/awa_django/job/1/change/"),
    ("post", "/admin/awa_django/job/1/do/retry/"),
    ("get", "/admin/awa_django/queuemeta/"),
    ("post", "/admin/awa_django/queuemeta/do/pause/default/"),
    ("get", "/admin/awa_django/cronjob/"),
]:
    request = getattr(RequestFactory(), method)(path)
    request.user = Operator()
    request._dont_enforce_csrf_checks = True
    match = resolve(path)
    response = match.func(request, *match.args, **match.kwargs)
    print(method, path, response.status_code, response.content.decode().strip())
"""


def test_django_admin_says_awa_pg_storage_is_not_supported(awa_db: AwaDatabase) -> None:
    from pathlib import Path

    from .dbutil import django_database

    entry = django_database(awa_db.url)  # the host may be a socket directory (the embedded server)
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", _ADMIN_ON_AWA_PG, str(entry["NAME"]), str(entry["HOST"]), str(entry["PORT"] or 5432)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=repo,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 6, out.stdout
    for line in lines:
        assert " 501 " in line and "awa-pg" in line and "supports only" in line, line


async def switch_to_queue_storage(awa_db: AwaDatabase) -> None:
    """Start and stop awa-pg's own worker: when it starts, it switches the database to its queue storage."""
    client = awa.AsyncClient(awa_db.awa_url)

    @client.task("noop", queue="storage")
    async def noop(job: Any) -> None:
        return None

    await client.start([("storage", 1)], poll_interval_ms=50)
    await client.shutdown()
    await client.close()


async def test_admin_operations_on_awa_pg_queue_storage_say_they_are_not_supported(awa_db: AwaDatabase) -> None:
    from datetime import UTC, datetime, timedelta

    await switch_to_queue_storage(awa_db)
    with psycopg.connect(awa_db.url) as conn:
        job = insert_job_sync(conn, {"n": 1}, kind="later", run_at=datetime.now(UTC) + timedelta(hours=1))
        conn.commit()
    cli = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "awa_bridge", "jobs", "run-now", str(job.id), "--database-url", awa_db.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 2, cli
    assert "Traceback" not in cli.stderr and "not supported" in cli.stderr, cli.stderr
    with pytest.raises(awa_bridge.ForeignSchema, match="queue storage"):
        awa_bridge.admin.run_now(awa_db.url, job.id)
    with psycopg.connect(awa_db.url, autocommit=True) as conn:
        assert conn.execute("SELECT state::text FROM awa.jobs WHERE id = %s", (job.id,)).fetchone()[0] == "scheduled"


async def test_the_returned_times_are_the_rows_times_on_awa_pgs_storage(awa_db: AwaDatabase) -> None:
    """insert_job reads back only ``created_at`` and takes ``run_at`` from the caller, or as
    ``created_at`` when the caller gave none: on awa-pg's database, before and after its worker
    switches it to its queue storage, the returned times are the stored row's (a job available now
    from each INSERT, a scheduled one, one with an ordering key, which awa-pg's function gives a
    run_at of its own clock)."""
    from datetime import UTC, datetime, timedelta

    later = datetime.now(UTC) + timedelta(hours=1)

    def insert_and_compare() -> None:
        with psycopg.connect(awa_db.url) as conn:
            jobs = [
                insert_job_sync(conn, {"n": 1}, kind="now", queue="times"),
                insert_job_sync(conn, {"n": 2}, kind="later", queue="times", run_at=later),
                insert_job_sync(conn, {"n": 3}, kind="ordered", queue="times", ordering_key="k"),
                insert_job_sync(conn, {"n": 4}, kind="urgent", queue="times", priority=1),  # all columns
            ]
            conn.commit()
            query = "SELECT id, run_at, created_at FROM awa.jobs WHERE id = ANY(%s)"
            rows = {row[0]: row[1:] for row in conn.execute(query, ([job.id for job in jobs],))}
        assert [(job.run_at, job.created_at) for job in jobs] == [rows[job.id] for job in jobs]
        assert all(job.created_at.tzinfo is UTC and job.run_at.tzinfo is UTC for job in jobs)

    insert_and_compare()
    await switch_to_queue_storage(awa_db)
    with pytest.raises(awa_bridge.ForeignSchema, match="queue storage"):  # the switch happened
        awa_bridge.admin.run_now(awa_db.url, 1)
    await asyncio.to_thread(insert_and_compare)


# -- cron on awa-pg's database: awa.cron_jobs is shared, awa.cron_job_sources is ours ---------


def _cron_cli(awa_db: AwaDatabase, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "awa_bridge", "cron", *args, "--database-url", awa_db.url],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cron_cli_works_on_an_awa_pg_database_without_recording_sources(awa_db: AwaDatabase, awa_client: Any) -> None:
    """No awa.cron_job_sources there: list has no source column (and says why), create / edit /
    trigger / delete work on awa.cron_jobs alone, and awa-pg's own admin sees the schedule."""
    created = _cron_cli(awa_db, "create", "nightly", "--cron", "0 3 * * *", "--kind", "report", "--timezone", "UTC")
    assert created.returncode == 0, created
    assert _cron_cli(awa_db, "edit", "nightly", "--queue", "reports").returncode == 0
    listed = _cron_cli(awa_db, "list")
    assert listed.returncode == 0, listed
    header, row = listed.stdout.splitlines()
    assert header.split()[:3] == ["name", "cron_expr", "timezone"] and "source" not in header, listed.stdout
    assert row.split()[0] == "nightly" and "reports" in row.split(), listed.stdout
    assert "awa-pg" in listed.stderr and "not recorded" in listed.stderr, listed.stderr
    theirs = awa_client.list_cron_jobs()
    assert [(s["name"], s["queue"]) for s in theirs] == [("nightly", "reports")], theirs
    triggered = _cron_cli(awa_db, "trigger", "nightly")
    assert triggered.returncode == 0 and "enqueued job" in triggered.stdout, triggered
    assert _cron_cli(awa_db, "delete", "nightly").returncode == 0
    with psycopg.connect(awa_db.url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM awa.cron_jobs").fetchone()[0] == 0
        assert conn.execute("SELECT kind, queue FROM awa.jobs").fetchall() == [("report", "reports")]


def test_schedule_upserts_on_an_awa_pg_database_write_the_shared_table_only(awa_db: AwaDatabase) -> None:
    from awa_bridge.cron import PeriodicJob, prune_schedules_sync, upsert_schedules_sync

    schedule = PeriodicJob("every_five", "*/5 * * * *", {"n": 1}, kind="tick")
    with psycopg.connect(awa_db.url) as conn:
        assert upsert_schedules_sync(conn, [schedule]) == ["every_five"]
        assert upsert_schedules_sync(conn, [schedule]) == []  # unchanged
        assert prune_schedules_sync(conn, []) == []  # nothing is known to be declared: nothing pruned
        conn.commit()
        assert conn.execute("SELECT name, kind FROM awa.cron_jobs").fetchall() == [("every_five", "tick")]
        assert conn.execute("SELECT to_regclass('awa.cron_job_sources')").fetchone()[0] is None


def test_django_awa_cron_works_on_an_awa_pg_database(awa_db: AwaDatabase) -> None:
    import os
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "AWA_TEST_DATABASE_URL": awa_db.url,
        "PYTHONPATH": str(repo),
        "DJANGO_SETTINGS_MODULE": "tests.django.project.settings",
    }

    def awa_cron(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "django", "awa_cron", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=repo,
        )

    created = awa_cron("create", "weekly", "--cron", "0 4 * * 1", "--kind", "report")
    assert created.returncode == 0, created
    listed = awa_cron("list")
    assert listed.returncode == 0, listed
    assert "source" not in listed.stdout.splitlines()[0] and "weekly" in listed.stdout, listed.stdout
    assert "awa-pg" in listed.stderr, listed.stderr
    deleted = awa_cron("delete", "weekly")
    assert deleted.returncode == 0 and "Traceback" not in deleted.stderr, deleted
