"""The schema's public face (docs/design.md, the schema contract) read back from the catalogs.

Everything here runs against a database migrated by our own runner and asks
PostgreSQL (pg_catalog, EXPLAIN, LISTEN) rather than our Python code, so a
migration that drifts from the contract fails here even if the bridge still
happens to work. Writes go through plain SQL on purpose: the CHECK
constraints must hold for callers that bypass our validation.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import errors as pg_errors

# format_type() spells timestamptz in full; the contract below uses the short name.
_LONG_TYPE_NAMES = {"timestamptz": "timestamp with time zone"}

JOB_STATES = [
    "scheduled",
    "available",
    "running",
    "completed",
    "retryable",
    "failed",
    "cancelled",
    "waiting_external",
]

JOBS_COLUMNS = [
    ("id", "bigint"),
    ("kind", "text"),
    ("queue", "text"),
    ("args", "jsonb"),
    ("state", "awa.job_state"),
    ("priority", "smallint"),
    ("attempt", "smallint"),
    ("max_attempts", "smallint"),
    ("run_at", "timestamptz"),
    ("heartbeat_at", "timestamptz"),
    ("deadline_at", "timestamptz"),
    ("attempted_at", "timestamptz"),
    ("finalized_at", "timestamptz"),
    ("created_at", "timestamptz"),
    ("errors", "jsonb[]"),
    ("metadata", "jsonb"),
    ("tags", "text[]"),
    ("unique_key", "bytea"),
    ("unique_states", "bit(8)"),
    ("callback_id", "uuid"),
    ("callback_timeout_at", "timestamptz"),
    ("callback_filter", "text"),
    ("callback_on_complete", "text"),
    ("callback_on_fail", "text"),
    ("callback_transform", "text"),
    ("run_lease", "bigint"),
    ("progress", "jsonb"),
]

# (name, type, default with its trailing ::cast removed). PostgreSQL never keeps a
# type modifier on a function parameter, so p_unique_states bit(8) reads back as "bit".
INSERT_JOB_COMPAT_ARGS = [
    ("p_kind", "text", None),
    ("p_queue", "text", "'default'"),
    ("p_args", "jsonb", "'{}'"),
    ("p_state", "awa.job_state", "'available'"),
    ("p_priority", "smallint", "2"),
    ("p_max_attempts", "smallint", "25"),
    ("p_run_at", "timestamptz", "NULL"),
    ("p_metadata", "jsonb", "'{}'"),
    ("p_tags", "text[]", "'{}'"),
    ("p_unique_key", "bytea", "NULL"),
    ("p_unique_states", "bit", "NULL"),
    ("p_ordering_key", "bytea", "NULL"),
]

QUEUE_META_COLUMNS = {
    "queue": "text",
    "paused": "boolean",
    "paused_at": "timestamptz",
    "paused_by": "text",
}

CRON_JOBS_COLUMNS = {
    "name": "text",
    "cron_expr": "text",
    "timezone": "text",
    "kind": "text",
    "queue": "text",
    "args": "jsonb",
    "priority": "smallint",
    "max_attempts": "smallint",
    "tags": "text[]",
    "metadata": "jsonb",
    "missed_fire_policy": "text",
    "last_enqueued_at": "timestamptz",
    "created_at": "timestamptz",
    "updated_at": "timestamptz",
    "paused_at": "timestamptz",
    "paused_by": "text",
}

UNIQUE_KEY = bytes(range(16))


def _long(type_name: str) -> str:
    return _LONG_TYPE_NAMES.get(type_name, type_name)


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection[Any]]:
    """Autocommit connection to the migrated database, awa tables empty."""
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


def columns(conn: psycopg.Connection[Any], relation: str) -> list[tuple[str, str]]:
    """(name, format_type) of a relation's live columns, in attnum order."""
    return conn.execute(
        """
        SELECT attname::text, format_type(atttypid, atttypmod)
        FROM pg_attribute
        WHERE attrelid = CAST(%s AS regclass) AND attnum > 0 AND NOT attisdropped
        ORDER BY attnum
        """,
        (relation,),
    ).fetchall()


def primary_key(conn: psycopg.Connection[Any], relation: str) -> list[str]:
    row = conn.execute(
        """
        SELECT array_agg(a.attname::text ORDER BY k.ord)
        FROM pg_constraint c
        CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
        WHERE c.conrelid = CAST(%s AS regclass) AND c.contype = 'p'
        """,
        (relation,),
    ).fetchone()
    return row[0] or []


def column_default(conn: psycopg.Connection[Any], relation: str, column: str) -> str | None:
    row = conn.execute(
        """
        SELECT pg_get_expr(d.adbin, d.adrelid)
        FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = CAST(%s AS regclass) AND a.attname = %s
        """,
        (relation, column),
    ).fetchone()
    return row[0] if row else None


def _strip_cast(expr: str) -> str:
    """``'{}'::text[]`` → ``'{}'``; ``NULL::"bit"`` → ``NULL``."""
    return re.sub(r'::[\w." \[\]]+$', "", expr)


# -- (a) (b) (c) (d): shapes ------------------------------------------------------------------


def test_job_state_enum_labels_in_order(conn: psycopg.Connection[Any]) -> None:
    labels = conn.execute(
        "SELECT enumlabel::text FROM pg_enum WHERE enumtypid = CAST('awa.job_state' AS regtype) ORDER BY enumsortorder"
    ).fetchall()
    assert [label for (label,) in labels] == JOB_STATES


def test_jobs_columns_names_order_and_types(conn: psycopg.Connection[Any]) -> None:
    assert columns(conn, "awa.jobs") == [(name, _long(type_)) for name, type_ in JOBS_COLUMNS]


def test_insert_job_compat_signature(conn: psycopg.Connection[Any]) -> None:
    # ::regproc fails if the name is overloaded, so this also proves there is exactly one.
    arguments, result, returns_set, return_type = conn.execute(
        """
        SELECT pg_get_function_arguments(p.oid), pg_get_function_result(p.oid), p.proretset,
               p.prorettype = CAST('awa.jobs' AS regtype)
        FROM pg_proc p
        WHERE p.oid = CAST(CAST('awa.insert_job_compat' AS regproc) AS oid)
        """
    ).fetchone()

    parsed = []
    for part in re.split(r", (?=p_)", arguments):
        match = re.fullmatch(r"(\w+) (.+?)(?: DEFAULT (.+))?", part)
        assert match, f"unparsed argument {part!r} in {arguments!r}"
        name, type_, default = match.groups()
        parsed.append((name, type_, None if default is None else _strip_cast(default)))
    expected = [(name, _long(type_), default) for name, type_, default in INSERT_JOB_COMPAT_ARGS]
    assert parsed == expected, arguments

    assert result == "awa.jobs"
    assert return_type is True
    assert returns_set is False, "insert_job_compat must return one row, not SETOF"


def test_queue_meta_columns(conn: psycopg.Connection[Any]) -> None:
    found = dict(columns(conn, "awa.queue_meta"))
    # The contract lists these and allows more ("paused_by text, ...").
    assert {name: found.get(name) for name in QUEUE_META_COLUMNS} == {
        name: _long(type_) for name, type_ in QUEUE_META_COLUMNS.items()
    }
    assert primary_key(conn, "awa.queue_meta") == ["queue"]


def test_cron_jobs_columns(conn: psycopg.Connection[Any]) -> None:
    assert dict(columns(conn, "awa.cron_jobs")) == {name: _long(type_) for name, type_ in CRON_JOBS_COLUMNS.items()}
    assert primary_key(conn, "awa.cron_jobs") == ["name"]
    default = column_default(conn, "awa.cron_jobs", "timezone")
    assert default is not None and _strip_cast(default) == "'UTC'"


# -- (e): limits are CHECK constraints --------------------------------------------------------


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("priority", 0),
        ("priority", 5),
        ("max_attempts", 0),
        ("max_attempts", 1001),
        ("queue", "q" * 201),
        ("kind", "k" * 201),
        ("tags", [f"t{i}" for i in range(21)]),
    ],
    ids=[
        "priority=0",
        "priority=5",
        "max_attempts=0",
        "max_attempts=1001",
        "queue>200",
        "kind>200",
        "21tags",
    ],
)
def test_jobs_limits_are_check_constraints(conn: psycopg.Connection[Any], column: str, value: Any) -> None:
    row = {"kind": "contract_probe", "queue": "contract", column: value}
    names = ", ".join(row)
    placeholders = ", ".join(["%s"] * len(row))
    with pytest.raises(psycopg.Error) as info:
        conn.execute(f"INSERT INTO awa.jobs ({names}) VALUES ({placeholders})", list(row.values()))
    assert info.value.sqlstate == "23514", info.value
    assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone()[0] == 0


def test_jobs_limits_accept_their_bounds(conn: psycopg.Connection[Any]) -> None:
    """The CHECKs are not stricter than the contract: the edge values go in."""
    conn.execute(
        "INSERT INTO awa.jobs (kind, queue, priority, max_attempts, tags) VALUES (%s, %s, 1, 1, %s),"
        " (%s, %s, 4, 1000, '{}')",
        ("k" * 200, "q" * 200, [f"t{i}" for i in range(20)], "k", "q"),
    )
    assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone()[0] == 2


def test_cron_missed_fire_policy_is_checked(conn: psycopg.Connection[Any]) -> None:
    insert = (
        "INSERT INTO awa.cron_jobs (name, cron_expr, kind, missed_fire_policy) "
        "VALUES (%s, '* * * * *', 'contract_probe', %s)"
    )
    with pytest.raises(psycopg.Error) as info:
        conn.execute(insert, ("bogus", "bogus"))
    assert info.value.sqlstate == "23514", info.value
    for policy in ("coalesce", "catch_up"):
        conn.execute(insert, (policy, policy))
    assert conn.execute("SELECT count(*) FROM awa.cron_jobs").fetchone()[0] == 2


# -- (f) (g): insert_job_compat behaviour -----------------------------------------------------


def _insert(conn: psycopg.Connection[Any], sql_args: str = "", params: tuple[Any, ...] = ()) -> tuple:
    """``SELECT ... FROM awa.insert_job_compat('contract_probe'<sql_args>)``."""
    return conn.execute(
        "SELECT id, state::text, run_at, unique_states::text, now() "
        f"FROM awa.insert_job_compat(CAST('contract_probe' AS text){sql_args})",
        params,
    ).fetchone()


def test_duplicate_unique_key_raises_23505(conn: psycopg.Connection[Any]) -> None:
    first = _insert(conn, ", p_unique_key => %s", (UNIQUE_KEY,))
    assert first[3] == "11111000"  # the default mask when a key is given
    with pytest.raises(pg_errors.UniqueViolation) as info:
        _insert(conn, ", p_unique_key => %s", (UNIQUE_KEY,))
    assert info.value.sqlstate == "23505"
    assert conn.execute("SELECT count(*) FROM awa.jobs").fetchone()[0] == 1


def test_unique_key_free_once_first_row_leaves_its_mask(conn: psycopg.Connection[Any]) -> None:
    mask_args = ", p_unique_key => %s, p_unique_states => CAST('11111000' AS bit(8))"
    first_id = _insert(conn, mask_args, (UNIQUE_KEY,))[0]
    conn.execute("UPDATE awa.jobs SET state = 'failed' WHERE id = %s", (first_id,))

    second_id = _insert(conn, mask_args, (UNIQUE_KEY,))[0]
    assert second_id != first_id
    # The second row is available, inside its own mask: the key is taken again.
    with pytest.raises(pg_errors.UniqueViolation):
        _insert(conn, mask_args, (UNIQUE_KEY,))
    states = conn.execute("SELECT state::text FROM awa.jobs ORDER BY id").fetchall()
    assert states == [("failed",), ("available",)]


def test_null_run_at_gives_available_now(conn: psycopg.Connection[Any]) -> None:
    _id, state, run_at, _mask, now = _insert(conn, ", p_run_at => NULL")
    assert state == "available"
    assert abs(run_at - now) < timedelta(seconds=5)


def test_explicit_scheduled_state_is_kept(conn: psycopg.Connection[Any]) -> None:
    _id, state, run_at, _mask, now = _insert(
        conn,
        ", p_state => CAST('scheduled' AS awa.job_state), p_run_at => now() + interval '1 hour'",
    )
    assert state == "scheduled"
    assert run_at - now == timedelta(hours=1)


# -- (h): NOTIFY on committed inserts of available jobs ---------------------------------------


def _wait_for_payload(listener: psycopg.Connection[Any], payload: str, timeout: float = 10.0) -> list[str]:
    """Collect 'awa_jobs' payloads until ``payload`` arrives; return all seen, in order."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while payload not in seen:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no NOTIFY {payload!r} on awa_jobs within {timeout}s; saw {seen}")
        for notify in listener.notifies(timeout=remaining, stop_after=1):
            assert notify.channel == "awa_jobs"
            seen.append(notify.payload)
    return seen


def test_notify_after_commit_of_available_job(db_url: str) -> None:
    tag = uuid.uuid4().hex[:8]
    pending_q, marker_q = f"pending_{tag}", f"marker_{tag}"
    with (
        psycopg.connect(db_url, autocommit=True) as listener,
        psycopg.connect(db_url) as writer,
        psycopg.connect(db_url, autocommit=True) as marker,
    ):
        listener.execute("LISTEN awa_jobs")
        _insert(writer, ", p_queue => %s", (pending_q,))  # open transaction, not committed
        # Notifications arrive in commit order: once the marker's has come, an
        # uncommitted insert's would have come before it if it were sent early.
        _insert(marker, ", p_queue => %s", (marker_q,))
        assert pending_q not in _wait_for_payload(listener, marker_q)

        writer.commit()
        assert _wait_for_payload(listener, pending_q)[-1] == pending_q


def test_no_notify_for_scheduled_job(db_url: str) -> None:
    tag = uuid.uuid4().hex[:8]
    scheduled_q, marker_q = f"scheduled_{tag}", f"marker_{tag}"
    with (
        psycopg.connect(db_url, autocommit=True) as listener,
        psycopg.connect(db_url, autocommit=True) as writer,
    ):
        listener.execute("LISTEN awa_jobs")
        _insert(
            writer,
            ", p_queue => %s, p_state => CAST('scheduled' AS awa.job_state), p_run_at => now() + interval '1 hour'",
            (scheduled_q,),
        )
        _insert(writer, ", p_queue => %s", (marker_q,))
        assert scheduled_q not in _wait_for_payload(listener, marker_q)


# -- (i): the dispatch index ------------------------------------------------------------------


def _index_names(plan: dict[str, Any]) -> list[str]:
    names = [plan["Index Name"]] if "Index Name" in plan else []
    for child in plan.get("Plans", []):
        names += _index_names(child)
    return names


def _node_types(plan: dict[str, Any]) -> list[str]:
    types = [plan["Node Type"]]
    for child in plan.get("Plans", []):
        types += _node_types(child)
    return types


def test_dispatch_query_uses_dispatch_index(conn: psycopg.Connection[Any]) -> None:
    definition = conn.execute("SELECT pg_get_indexdef(CAST('awa.jobs_dispatch_idx' AS regclass))").fetchone()[0]
    assert "(queue, priority, run_at, id)" in definition
    assert "WHERE (state = 'available'::awa.job_state)" in definition

    conn.execute("SET enable_seqscan = off")
    (raw,) = conn.execute(
        "EXPLAIN (FORMAT JSON) SELECT id FROM awa.jobs WHERE state = 'available' AND queue = 'q' "
        "ORDER BY priority, run_at, id LIMIT 10"
    ).fetchone()
    plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
    assert "jobs_dispatch_idx" in _index_names(plan), plan
    # The index returns rows in dispatch order: no sort on top of it.
    assert "Sort" not in _node_types(plan), plan
