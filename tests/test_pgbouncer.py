"""PgBouncer in transaction mode in front of the test database (docs/howto/scaling.md).

Each test starts its own ``pgbouncer`` process (``pool_mode = transaction``)
on a free port against the server the suite uses (a TCP server from
``DATABASE_URL``, or the embedded one through its socket directory), and is
skipped, saying so, when no ``pgbouncer`` binary is installed (Debian:
``apt-get install pgbouncer``; ``.ci/run`` installs it). What the how-to
promises, checked the way it is written there:

* application code enqueues through PgBouncer with the driver settings the
  how-to gives (asyncpg ``statement_cache_size=0``, psycopg
  ``prepare_threshold=None``), sync, async, one job or many (COPY), inside
  the application's own transaction, which still commits or rolls back with
  the job;
* a worker on the direct URL runs those jobs;
* the named prepared statements the drivers use by default do break in
  transaction mode (so the settings are needed, not folklore).
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import asyncpg
import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

import awa_bridge

from .conftest import count_rows
from .waiting import job_state, wait_until

PGBOUNCER = shutil.which("pgbouncer") or next(
    (path for path in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(path, os.X_OK)), None
)

pytestmark = pytest.mark.skipif(
    PGBOUNCER is None, reason="no pgbouncer binary installed (Debian: apt-get install pgbouncer)"
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@pytest.fixture
def bouncer_url(db_url: str) -> Iterator[str]:
    """URL of ``db_url``'s database through a fresh PgBouncer in transaction mode."""
    target = urlsplit(db_url)
    dbname = target.path.lstrip("/")
    query = dict(parse_qsl(target.query))
    host = target.hostname or query.get("host", "127.0.0.1")
    # PgBouncer reaches a socket directory (the embedded server's, mode 0700) as that directory's owner.
    run_as = pwd.getpwuid(os.stat(host).st_uid).pw_name if host.startswith("/") else "nobody"
    server_port = target.port or int(query.get("port", 5432))
    user = target.username or "postgres"
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="awa-pgbouncer-") as tmp:
        directory = Path(tmp)
        directory.chmod(0o755)  # readable by the unprivileged user pgbouncer switches to as root
        (directory / "userlist.txt").write_text(f'"{user}" ""\n')
        (directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"{dbname} = host={host} port={server_port} dbname={dbname}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\n"
            f"auth_type = trust\nauth_file = {directory / 'userlist.txt'}\n"
            "pool_mode = transaction\ndefault_pool_size = 4\nmax_client_conn = 100\n"
            f"unix_socket_dir =\nlogfile =\npidfile =\n"
        )
        for name in ("userlist.txt", "pgbouncer.ini"):
            (directory / name).chmod(0o644)
        command = [str(PGBOUNCER), str(directory / "pgbouncer.ini")]
        if os.geteuid() == 0:
            command[1:1] = ["-u", run_as]  # pgbouncer refuses to run as root
        log = directory / "pgbouncer.log"
        with log.open("w") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 10
            while not _accepts(port):
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"pgbouncer did not start: {log.read_text()}")
                time.sleep(0.05)  # polling for the port, not ordering events
            yield urlunsplit(target._replace(netloc=f"{user}@127.0.0.1:{port}", query=""))
        finally:
            process.terminate()
            process.wait(timeout=10)


async def test_app_code_enqueues_through_pgbouncer_with_the_documented_driver_settings(
    bouncer_url: str, db_url: str
) -> None:
    # asyncpg: statement_cache_size=0 (asyncpg then uses unnamed statements only).
    conns = [await asyncpg.connect(bouncer_url, statement_cache_size=0) for _ in range(6)]
    try:
        for round_ in range(5):  # more clients than server connections: they share them
            for index, conn in enumerate(conns):
                async with conn.transaction():
                    await awa_bridge.insert_job(conn, {"n": round_ * 10 + index}, kind="via_bouncer")
        async with conns[0].transaction():
            result = await awa_bridge.insert_many(conns[0], [{"n": n} for n in range(100, 150)], kind="via_bouncer")
        assert result.inserted == 50
        for conn in conns[:3]:  # the unique path's temp staging table, on shared server connections
            async with conn.transaction():
                unique = await awa_bridge.insert_many(
                    conn, [{"n": n} for n in range(500, 510)], kind="via_bouncer", unique=True
                )
            assert unique.inserted + unique.skipped_duplicates == 10
    finally:
        for conn in conns:
            await conn.close()

    # psycopg sync and async: prepare_threshold=None (never a named prepared statement).
    with psycopg.connect(bouncer_url, prepare_threshold=None) as conn:
        for n in range(200, 220):
            awa_bridge.insert_job_sync(conn, {"n": n}, kind="via_bouncer")
            conn.commit()
        with conn.transaction():
            conn.execute("INSERT INTO app_orders (note) VALUES ('kept')")
            awa_bridge.insert_job_sync(conn, {"n": 300}, kind="via_bouncer")
        with pytest.raises(RuntimeError), conn.transaction():
            conn.execute("INSERT INTO app_orders (note) VALUES ('rolled back')")
            awa_bridge.insert_job_sync(conn, {"n": 301}, kind="via_bouncer")
            raise RuntimeError("the application's own failure")
    async with await psycopg.AsyncConnection.connect(bouncer_url, prepare_threshold=None, autocommit=True) as aconn:
        for n in range(400, 420):
            await awa_bridge.insert_job(aconn, {"n": n}, kind="via_bouncer")

    # SQLAlchemy on psycopg: the same option through connect_args.
    engine = create_engine(
        "postgresql+psycopg://" + bouncer_url.split("://", 1)[1], connect_args={"prepare_threshold": None}
    )
    try:
        for n in range(600, 610):
            with Session(engine) as session, session.begin():
                awa_bridge.insert_job_sync(session, {"n": n}, kind="via_bouncer")
    finally:
        engine.dispose()

    assert count_rows(db_url) == 30 + 50 + 10 + 20 + 1 + 20 + 10
    assert count_rows(db_url, "SELECT count(*) FROM app_orders") == 1
    assert count_rows(db_url, "SELECT count(*) FROM awa.jobs WHERE args->>'n' = '301'") == 0


async def test_a_worker_on_the_direct_url_runs_jobs_enqueued_through_pgbouncer(
    bouncer_url: str, db_url: str, make_client: Any
) -> None:
    client = make_client()
    done: list[int] = []

    @client.task("bounced")
    async def handle(job: Any) -> None:
        done.append(job.args["n"])

    await client.start(["default:4"])
    conn = await asyncpg.connect(bouncer_url, statement_cache_size=0)
    try:
        ids = [(await awa_bridge.insert_job(conn, {"n": n}, kind="bounced")).id for n in range(20)]
    finally:
        await conn.close()
    await wait_until(lambda: all(job_state(db_url, job_id) == "completed" for job_id in ids))
    assert set(done) == set(range(20)), sorted(done)  # at least once: a slow machine may rescue and rerun


async def test_named_prepared_statements_break_in_transaction_mode(bouncer_url: str) -> None:
    """Why the settings above: asyncpg's default statement cache fails once clients share server connections."""
    conns = [await asyncpg.connect(bouncer_url) for _ in range(8)]
    try:

        async def enqueue(conn: asyncpg.Connection[Any], n: int) -> None:
            await awa_bridge.insert_job(conn, {"n": n}, kind="cached")

        with pytest.raises(asyncpg.PostgresError, match="prepared statement"):
            for round_ in range(20):
                await asyncio.gather(*(enqueue(conn, round_ * 10 + i) for i, conn in enumerate(conns)))
    finally:
        for conn in conns:
            conn.terminate()
