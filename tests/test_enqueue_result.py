"""The ``Job`` that ``insert_job`` returns is the row it wrote, field for field.

``insert_job`` builds that ``Job`` from the values it sent (flat args without
re-parsing their JSON) and only the id and times from the database, so every
kind of args and option is compared here with the row read back through
``row_to_job``, and with the args the worker decodes.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa_bridge
from awa_bridge.enqueue import row_to_job


@dataclasses.dataclass
class Zebra:
    zeta: str
    alpha: int
    ratio: float
    flag: bool
    nothing: None = None


CASES: list[tuple[Any, dict[str, Any]]] = [
    (Zebra("z", 1, 0.000015, True), {}),
    ({"b": 1, "a": "é", "c": None, "d": 1e16}, {"kind": "flat_dict"}),
    ({"nested": {"y": [1, 2.5, "x"], "x": {}}, "list": [True]}, {"kind": "nested"}),
    (
        {"k": "v"},
        {
            "kind": "everything",
            "queue": "q1",
            "priority": 1,
            "max_attempts": 3,
            "run_at": datetime.now(UTC) + timedelta(hours=1),
            "metadata": {"m": [1]},
            "tags": ["t1", "t2"],
            "unique": {"by_args": True},
            "ordering_key": "ok",
        },
    ),
    # Every column, no ordering key: the full INSERT rather than the function (kept for ordering keys).
    (
        {"k": "w"},
        {
            "kind": "every_column",
            "queue": "q2",
            "priority": 3,
            "max_attempts": 7,
            "run_at": datetime.now(UTC) + timedelta(minutes=5),
            "metadata": {"m": {"n": 1}},
            "tags": ["t"],
            "unique": {"by_args": True, "states": ["scheduled", "available"]},
        },
    ),
    # One option off its default each: these leave the three-argument statement for the full one.
    (Zebra("p", 2, 1.5, False), {"priority": 4}),
    (Zebra("m", 3, 2.5, True), {"max_attempts": 1}),
    (Zebra("d", 4, 3.5, False), {"metadata": {"trace": "t"}}),
    (Zebra("q", 5, 4.5, True), {"queue": "other", "priority": 2, "max_attempts": 25}),
]
IDS = [
    "dataclass",
    "flat-dict",
    "nested",
    "all-options",
    "every-column",
    "priority",
    "max-attempts",
    "metadata",
    "queue",
]


def _read_back(conn: psycopg.Connection[Any], job_id: int) -> awa_bridge.Job:
    cursor = conn.cursor(row_factory=psycopg.rows.dict_row)
    row = cursor.execute("SELECT * FROM awa.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return row_to_job(row)


@pytest.mark.parametrize(("args", "opts"), CASES, ids=IDS)
def test_the_returned_job_is_the_row_written(db_url: str, args: Any, opts: dict[str, Any]) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        job = awa_bridge.insert_job_sync(conn, args, **opts)
        cursor = conn.cursor(row_factory=psycopg.rows.dict_row)
        row = cursor.execute(
            "SELECT *, CAST(args AS text) AS args_text FROM awa.jobs WHERE id = %s", (job.id,)
        ).fetchone()
    assert row is not None
    args_text = row.pop("args_text")
    read_back = row_to_job(row)
    assert job == dataclasses.replace(read_back, args=job.args)
    assert job.args == json.loads(args_text)
    given = dataclasses.asdict(args) if dataclasses.is_dataclass(args) else args
    if all(not isinstance(value, (dict, list)) for value in given.values()):
        assert list(job.args) == list(given)  # flat args: a copy, in the caller's key order
    if isinstance(args, dict):
        assert job.args is not args


@pytest.mark.parametrize(("args", "opts"), CASES, ids=IDS)
@pytest.mark.parametrize("driver", ["asyncpg", "psycopg-async"])
async def test_an_async_insert_returns_the_row_written(
    db_url: str, driver: str, args: Any, opts: dict[str, Any]
) -> None:
    """The async path reads its one row with ``fetch_one`` (on asyncpg a ``Record``, not a dict)."""
    if driver == "asyncpg":
        import asyncpg

        aconn = await asyncpg.connect(db_url)
        try:
            job = await awa_bridge.insert_job(aconn, args, **opts)
        finally:
            await aconn.close()
    else:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as pconn:
            job = await awa_bridge.insert_job(pconn, args, **opts)
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert job == dataclasses.replace(_read_back(conn, job.id), args=job.args)


def test_an_ordering_key_is_kept_beside_the_job(db_url: str) -> None:
    """awa.jobs has no column for it: such a job goes through awa.insert_job_compat, which keeps it."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        ordered = awa_bridge.insert_job_sync(conn, {"n": 1}, kind="ordered", ordering_key="customer-7")
        plain = awa_bridge.insert_job_sync(conn, {"n": 2}, kind="ordered", priority=3)
        keys = dict(conn.execute("SELECT job_id, ordering_key FROM awa.job_ordering_keys").fetchall())
    assert keys == {ordered.id: b"customer-7"}
    assert plain.id not in keys
