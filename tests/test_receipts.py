"""Receipts (docs/howto/receipts.md) on a real PostgreSQL, and the receipts lab.

The API: first attempt records, a repeat reuses the outcome without the
effect, a different payload under the same key is a conflict, the receipt
commits and rolls back with the caller's transaction, concurrent first
attempts serialize, an unrecorded external outcome is reported rather than
retried, on every kind of connection the bridge supports. The lab:
``examples/receipts_lab.py`` with a real worker process killed by SIGKILL.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from awa_bridge.errors import (
    AwaError,
    OutcomeUnknown,
    ReceiptConflict,
    ReceiptNotFound,
    ReceiptNotSaved,
    ValidationError,
)
from awa_bridge.receipts import (
    fingerprint,
    get_receipt,
    idempotency_key,
    prune_receipts,
    receipt,
    record_effect,
    record_effect_async,
    resolve_receipt,
)

from .dbutil import with_driver
from .procs import wait_for
from .waiting import lock_waiters

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Refund:
    order: str
    cents: int


@pytest.fixture
def rdb(db_url: str) -> str:
    """The session database with no receipts and an empty application table for effects."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("TRUNCATE awa.receipts")
        conn.execute("DROP TABLE IF EXISTS app_refunds")
        conn.execute("CREATE TABLE app_refunds (id serial PRIMARY KEY, order_id text NOT NULL, cents int NOT NULL)")
    return db_url


def refunds(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM app_refunds").fetchone()[0]


def receipts_table(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT tenant, operation_key, payload_fingerprint, outcome, recorded_at IS NOT NULL "
            "FROM awa.receipts ORDER BY 1, 2"
        ).fetchall()


def refund_once(conn: psycopg.Connection[Any], order: str, cents: int, calls: list[str] | None = None) -> Any:
    """The application's handler: a refund guarded by a receipt, in the caller's transaction."""
    with receipt(conn, "acme", f"refund:{order}", {"order": order, "cents": cents}) as r:
        if r.recorded:
            return r.outcome
        if calls is not None:
            calls.append(order)
        refund_id = conn.execute(
            "INSERT INTO app_refunds (order_id, cents) VALUES (%s, %s) RETURNING id", (order, cents)
        ).fetchone()[0]
        return r.save({"refund_id": refund_id})


# -- the API ---------------------------------------------------------------------------------------


def test_repeat_with_same_key_and_payload_reuses_the_outcome_without_the_effect(rdb: str) -> None:
    calls: list[str] = []
    with psycopg.connect(rdb) as conn:
        first = refund_once(conn, "o-1", 500, calls)
        conn.commit()
        second = refund_once(conn, "o-1", 500, calls)
        conn.commit()
    assert first == second == {"refund_id": 1}
    assert calls == ["o-1"] and refunds(rdb) == 1
    [row] = receipts_table(rdb)
    assert row[:2] == ("acme", "refund:o-1") and row[3] == {"refund_id": 1} and row[4]
    assert bytes(row[2]) == fingerprint({"cents": 500, "order": "o-1"})  # key order does not matter


def test_same_key_with_a_different_payload_is_a_conflict_naming_the_key(rdb: str) -> None:
    with psycopg.connect(rdb) as conn:
        refund_once(conn, "o-2", 500)
        conn.commit()
        before = receipts_table(rdb)
        with pytest.raises(
            ReceiptConflict, match=r"operation key 'refund:o-2' \(tenant 'acme'\) was already recorded"
        ) as info:
            refund_once(conn, "o-2", 900)
        conn.rollback()
    assert (info.value.tenant, info.value.operation_key) == ("acme", "refund:o-2")
    assert receipts_table(rdb) == before and refunds(rdb) == 1


def test_receipt_and_effect_roll_back_together(rdb: str) -> None:
    calls: list[str] = []
    with psycopg.connect(rdb) as conn:
        with pytest.raises(RuntimeError), conn.transaction():
            refund_once(conn, "o-3", 100, calls)
            raise RuntimeError("the rest of the transaction failed")
        assert receipts_table(rdb) == [] and refunds(rdb) == 0
        refund_once(conn, "o-3", 100, calls)  # nothing was recorded: the effect runs again, once
        conn.commit()
    assert calls == ["o-3", "o-3"] and refunds(rdb) == 1


def test_leaving_the_block_without_saving_is_an_error(rdb: str) -> None:
    with psycopg.connect(rdb) as conn:
        with pytest.raises(ReceiptNotSaved, match=r"without r\.save"), receipt(conn, "acme", "k", {}) as r:
            assert not r.recorded
        conn.rollback()
        with receipt(conn, "acme", "k", {}) as r:
            r.save(None)
            with pytest.raises(AwaError, match="already called"):
                r.save(None)
        conn.commit()
        with receipt(conn, "acme", "k", {}) as r:
            assert r.recorded and r.outcome is None
            with pytest.raises(AwaError, match="already recorded"):
                r.save(1)


def test_external_effect_with_unknown_outcome_is_reported_then_resolved(rdb: str) -> None:
    """Claim committed first (autocommit), provider call dies: the repeat must not call the provider again."""
    sent: list[str] = []
    payload = {"to": "a@b.c", "template": "invoice"}
    with psycopg.connect(rdb, autocommit=True) as conn:
        with pytest.raises(TimeoutError), receipt(conn, "acme", "email:inv-7", payload) as r:
            sent.append(r.idempotency_key)  # handed to the provider...
            raise TimeoutError("provider did not answer")  # ...which may or may not have sent it
        with pytest.raises(OutcomeUnknown, match="reconcile") as info, receipt(conn, "acme", "email:inv-7", payload):
            sent.append("again")  # never reached
        assert info.value.operation_key == "email:inv-7" and info.value.started_at is not None
        assert get_receipt(conn, "acme", "email:inv-7").pending
        record = resolve_receipt(conn, "acme", "email:inv-7", payload, {"message_id": "m-1", "reconciled": True})
        assert not record.pending and record.outcome["message_id"] == "m-1"
        with receipt(conn, "acme", "email:inv-7", payload) as r:
            assert r.recorded and r.outcome == {"message_id": "m-1", "reconciled": True}
        with pytest.raises(AwaError, match="already has a recorded outcome"):
            resolve_receipt(conn, "acme", "email:inv-7", payload, {})
        with pytest.raises(ReceiptConflict):
            resolve_receipt(conn, "acme", "email:inv-7", {"other": 1}, {})
        with pytest.raises(ReceiptNotFound):
            resolve_receipt(conn, "acme", "email:nope", payload, {})
    assert sent == [idempotency_key("acme", "email:inv-7")]
    assert sent[0].startswith("awa-") and len(sent[0]) == 36


def test_concurrent_first_attempts_serialize(rdb: str) -> None:
    """Four transactions race for one key: one effect; the others wait, then reuse its outcome."""
    calls: list[str] = []
    results: list[Any] = [None] * 4
    barrier = threading.Barrier(4)
    returned: list[int] = []
    order = threading.Lock()

    def attempt(index: int) -> None:
        with psycopg.connect(rdb) as conn:
            barrier.wait()
            with conn.transaction():
                results[index] = refund_once(conn, "o-9", 700, calls)
                with order:
                    first = not returned  # the others cannot return before this one commits
                    returned.append(index)
                if first:  # hold the claim until the other three wait on it
                    wait_for(lambda: lock_waiters(rdb) == 3, 10, "the other attempts to wait on the claim")

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert calls == ["o-9"] and refunds(rdb) == 1
    assert results == [{"refund_id": 1}] * 4


def test_a_waiting_attempt_takes_over_when_the_first_rolls_back(rdb: str) -> None:
    calls: list[str] = []
    claimed = threading.Event()
    result: list[Any] = []

    def second() -> None:
        claimed.wait(5)
        with psycopg.connect(rdb) as conn, conn.transaction():
            result.append(refund_once(conn, "o-10", 1, calls))

    thread = threading.Thread(target=second)
    thread.start()
    with psycopg.connect(rdb) as conn:
        with receipt(conn, "acme", "refund:o-10", {"order": "o-10", "cents": 1}) as r:
            assert not r.recorded
            claimed.set()
            wait_for(lambda: lock_waiters(rdb) == 1, 10, "the second attempt to wait on our claim")
            r.save({"refund_id": -1})
        conn.rollback()  # ...and we give up
    thread.join(10)
    assert calls == ["o-10"] and result == [{"refund_id": 1}] and refunds(rdb) == 1


@pytest.mark.parametrize(
    ("tenant", "key", "payload", "field"),
    [
        ("", "k", {}, "tenant"),
        ("t\x00", "k", {}, "tenant"),
        ("t" * 201, "k", {}, "tenant"),
        (None, "k", {}, "tenant"),
        ("t", "", {}, "operation_key"),
        ("t", "k" * 1001, {}, "operation_key"),
        ("t", 42, {}, "operation_key"),
        ("t", "k", {"a": {1, 2}}, "payload.a"),
        ("t", "k", {"a": "nul\x00"}, "payload.a"),
        ("t", "k", {"x": float("nan")}, "payload.x"),
    ],
)
def test_bad_input_is_rejected_before_anything_is_written(rdb: str, tenant, key, payload, field) -> None:
    with psycopg.connect(rdb) as conn:
        with pytest.raises(ValidationError) as info:
            record_effect(conn, tenant, key, payload, lambda: 1)
        assert info.value.field == field
        conn.rollback()
    assert receipts_table(rdb) == []


def test_an_outcome_that_is_not_json_is_rejected(rdb: str) -> None:
    with psycopg.connect(rdb) as conn:
        with pytest.raises(ValidationError, match="outcome"), receipt(conn, "t", "k", {}) as r:
            r.save({"when": object()})
        conn.rollback()
    assert receipts_table(rdb) == []


def test_fingerprints() -> None:
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint(Refund("o", 1)) == fingerprint({"order": "o", "cents": 1})
    assert fingerprint(b'{"a":1}') != fingerprint({"a": 1}) != fingerprint('{"a":1}')
    assert fingerprint(1.0) != fingerprint(1) and len(fingerprint([])) == 32


def test_prune_keeps_pending_and_recent_receipts(rdb: str) -> None:
    with psycopg.connect(rdb, autocommit=True) as conn:
        record_effect(conn, "acme", "old", {}, lambda: "done")
        record_effect(conn, "other", "old", {}, lambda: "done")
        record_effect(conn, "acme", "new", {}, lambda: "done")
        with pytest.raises(RuntimeError), receipt(conn, "acme", "pending", {}):
            raise RuntimeError("crash before the outcome")
        conn.execute("UPDATE awa.receipts SET created_at = now() - interval '10 days' WHERE operation_key <> 'new'")
        assert prune_receipts(conn, 86400, tenant="acme") == 1
        assert prune_receipts(conn, 86400) == 1
        assert sorted(r[1] for r in receipts_table(rdb)) == ["new", "pending"]
        for bad in (-1, "1", True):
            with pytest.raises(ValidationError, match="older_than_seconds"):
                prune_receipts(conn, bad)


# -- every connection the bridge supports ----------------------------------------------------------------


def test_sqlalchemy_session_and_django_atomic(rdb: str, django_setup: None) -> None:
    from django.db import connection as django_connection
    from django.db import transaction
    from sqlalchemy import create_engine, text
    from sqlalchemy.orm import Session

    engine = create_engine(with_driver(rdb, "psycopg"))
    try:
        for _ in range(2):
            with Session(engine) as session:

                def effect(session: Session = session) -> Any:
                    session.execute(text("INSERT INTO app_refunds (order_id, cents) VALUES ('sa', 1)"))
                    return "sa-done"

                assert record_effect(session, "acme", "sa", {"n": 1}, effect) == "sa-done"
                session.commit()
    finally:
        engine.dispose()

    def django_effect() -> str:
        with django_connection.cursor() as cursor:
            cursor.execute("INSERT INTO app_refunds (order_id, cents) VALUES ('dj', 1)")
        return "dj-done"

    for _ in range(2):
        with transaction.atomic():
            assert record_effect(django_connection, "acme", "dj", Refund("dj", 1), django_effect) == "dj-done"
    with pytest.raises(ReceiptConflict), transaction.atomic():
        record_effect(django_connection, "acme", "dj", Refund("dj", 2), django_effect)
    django_connection.close()
    assert refunds(rdb) == 2 and len(receipts_table(rdb)) == 2


async def test_async_connections(rdb: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(rdb)
    try:
        for expected_recorded in (False, True):
            async with conn.transaction(), receipt(conn, "acme", "apg", {"n": 1}) as r:
                assert r.recorded is expected_recorded
                if not r.recorded:
                    await conn.execute("INSERT INTO app_refunds (order_id, cents) VALUES ('apg', 1)")
                    await r.save({"ok": True})
            assert r.outcome == {"ok": True}
    finally:
        await conn.close()

    async def effect() -> str:
        await aconn.execute("INSERT INTO app_refunds (order_id, cents) VALUES ('pga', 1)")
        return "pga-done"

    async with await psycopg.AsyncConnection.connect(rdb) as aconn:
        for _ in range(2):
            assert await record_effect_async(aconn, "acme", "pga", [1, 2], effect) == "pga-done"
            await aconn.commit()
        with pytest.raises(ReceiptConflict):
            await record_effect_async(aconn, "acme", "pga", [2, 1], effect)
    assert refunds(rdb) == 2


# -- the lab -----------------------------------------------------------------------------------------------------


def test_receipts_lab_every_case_with_a_real_worker_killed_by_sigkill(server_url: str, tmp_path: Path) -> None:
    """``python examples/receipts_lab.py --json`` as users run it: every case's counts and final job state."""
    env = {**os.environ, "DATABASE_URL": server_url}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "receipts_lab.py"), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - started < 60
    report = json.loads(proc.stdout)
    results = report["cases"]
    counts = {
        case: (r["handler_starts"], r["external_requests"], r["delivered_receipts"], r["db_effects"], r["job"])
        for case, r in results.items()
    }
    assert counts == {
        "a": (1, 1, 1, None, "completed"),
        "b": (2, 2, 2, None, "completed"),
        "c": (2, 2, 1, None, "completed"),
        "d": (2, 2, 1, None, "completed"),
        "e": (2, 1, 1, None, "parked: waiting_external (OutcomeUnknown)"),
        "f": (1, 0, 0, None, "completed"),
        "g": (3, 2, 1, None, "failed: ReceiptConflict; failed: operation_conflict"),
        "db-a": (1, None, None, 1, "completed"),
        "db-b": (2, None, None, 2, "completed"),
        "db-c": (2, None, None, 1, "completed"),
        "db-d": (1, None, None, 0, "completed"),
        "h": (2, None, None, 1, "completed"),
    }
    assert all(r["as_expected"] for r in results.values())
    # What the provider did with the repeats: (c) and (d) replayed, (g) refused the changed payload.
    assert [results[c]["provider_replays"] for c in "bcdeg"] == [0, 1, 1, 0, 0]
    assert results["g"]["provider_conflicts"] == 1
    # The in-database effects were written by the attempts the lesson says.
    assert results["db-b"]["effect_attempts"] == [1, 2] and results["db-c"]["effect_attempts"] == [1]
    assert results["h"]["effect_attempts"] == [2], "the killed attempt's uncommitted refund must roll back"
    # (e) is parked with what an operator needs to reconcile it.
    [parked] = results["e"]["jobs"]
    assert parked["state"] == "waiting_external" and parked["callback_id"]
    assert parked["outcome_unknown"]["operation_key"] == "receipt-email:order-E-1001"

    def trace(case: str) -> str:
        return "\n".join(results[case]["trace"])

    def at(case: str, pattern: str) -> int:
        found = re.search(pattern, trace(case))
        assert found, (pattern, trace(case))
        return found.start()

    for case in ("b", "c", "d", "e", "g", "db-b", "db-c", "h"):
        assert "in the crash window" in trace(case) and "rescued by maintenance: heartbeat stale" in trace(case)
        [job_id] = [job["id"] for job in results[case]["jobs"][:1]]
        assert at(case, "lab: SIGKILL worker 1") < at(case, rf"job {job_id} attempt 2 +handler started")
    # Every line a job wrote names that job; the lab's lines about (g) are in (g)'s trace only.
    for case, result in results.items():
        for line in result["trace"]:
            assert re.match(r"\+ *[\d.]+s  (job \d+ |\s+lab: )", line), (case, line)
        assert ("lab: edited order G" in trace(case)) == (case == "g"), case
    first, second = (job["id"] for job in results["g"]["jobs"])
    assert at("g", rf"job {second} attempt 1 +handler started") < at("g", rf"job {first} attempt 2 +handler started")
    assert re.search(rf"job {second} +acknowledged: failed", trace("g"))
    # (h): the completion transaction begins before the handler runs in it; the job is then seen completed.
    [h] = (job["id"] for job in results["h"]["jobs"])
    began = at("h", rf"job {h} attempt 2 +completion transaction began")
    assert began < at("h", rf"job {h} attempt 2 +handler started") < at("h", rf"job {h} +acknowledged: completed")
    assert "replayed the original answer" in trace("d") and "receipt resent" in trace("d")
    assert "outcome unknown" in trace("e") and not re.search("attempt 2 +provider answered", trace("e"))
    assert "receipt conflict" in trace("g") and "422: operation_conflict" in trace("g")
    assert "receipt found" in trace("db-c") and "outcome reused" in trace("db-c")
    for case in ("f", "db-d"):
        assert trace(case).index("acknowledged: completed") < trace(case).index("lab: SIGKILL worker 1")

    # And the table a person reads.
    table = subprocess.run(
        [sys.executable, str(REPO / "examples" / "receipts_lab.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert table.returncode == 0, table.stdout + table.stderr
    lines = table.stdout.splitlines()
    assert lines[2].split() == ["case", "starts", "requests", "delivered", "db", "effects", "job"]
    row = next(line for line in lines if line.startswith("(d) "))
    assert row.split()[-5:] == ["2", "2", "1", "-", "completed"]


def test_receipts_lab_ctrl_c_cleans_up_and_says_so_in_one_line(server_url: str, tmp_path: Path) -> None:
    """Ctrl-C in a terminal (SIGINT to the whole process group) while the cases wait at their crash instant."""
    env = {**os.environ, "DATABASE_URL": server_url}
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "receipts_lab.py")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        found = re.match(r"receipts lab on database (receipts_lab_\w+) ", first)
        assert found, first
        name = found.group(1)
        lab_url = urlunsplit(urlsplit(server_url)._replace(path="/" + name))

        def in_crash_window() -> bool:
            try:
                with psycopg.connect(lab_url, autocommit=True) as conn:
                    query = "SELECT count(*) FROM receipts_lab.trace WHERE event = 'in the crash window'"
                    return bool(conn.execute(query).fetchone()[0])
            except psycopg.Error:  # the lab's tables are not there yet
                return False

        wait_for(in_crash_window, 30, "a case at its crash instant")
        os.killpg(proc.pid, signal.SIGINT)
        interrupted = time.monotonic()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert time.monotonic() - interrupted < 10
    assert err == f"interrupted: stopped the workers and the mail provider, dropped database {name}\n", err
    assert "Traceback" not in out
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # no worker or provider left in its process group
    with psycopg.connect(server_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,)).fetchone()[0] == 0


def test_receipts_lab_without_psycopg_says_what_to_install(tmp_path: Path) -> None:
    """Without the example dependencies: one line saying what to install, not a traceback."""
    from .test_user_paths import not_installed

    absent = not_installed(tmp_path, "psycopg")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(absent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "receipts_lab.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 1 and done.stdout == "", (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: psycopg is not installed") and "pip install -e '.[examples]'" in done.stderr
