"""The ``Job`` that ``insert_job`` returns is the row it wrote, field for field.

``insert_job`` builds that ``Job`` from the values it sent (flat args without
re-parsing their JSON) and only the id and times from the database, so every
kind of args and option is compared here with the row read back through
``row_to_job``, and with the args the worker decodes.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import awa_bridge
from awa_bridge import ValidationError
from awa_bridge.args import plain_args
from awa_bridge.enqueue import _INSERT_PLAIN, plain_insert, row_to_job


@dataclasses.dataclass
class Zebra:
    zeta: str
    alpha: int
    ratio: float
    flag: bool
    nothing: None = None


@dataclasses.dataclass
class Letter:
    """Plain args (ASCII text, integers, booleans, None): the short path of ``insert_job``."""

    to: str
    count: int
    urgent: bool
    note: str | None = None


CASES: list[tuple[Any, dict[str, Any]]] = [
    (Zebra("z", 1, 0.000015, True), {}),
    (Letter("a@example.com", -(2**63), True), {}),
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
    "plain-dataclass",
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


class Tone(enum.IntEnum):
    LOW = 1


class Colour(enum.StrEnum):
    RED = "red"


# Field values on both sides of the short path's line: the plain ones it takes, and those it hands to
# the full path (text that is not ASCII or not storable, integers past 64 bits, floats, containers,
# subclasses of str and int).
_FIELD_VALUES = st.one_of(
    st.text(st.characters(max_codepoint=127), max_size=6),
    st.text(max_size=4),
    st.sampled_from(["a\x00b", "\ud800", "caf\u00e9", "\u2028", ""]),
    st.integers(-(2**64), 2**64),
    st.sampled_from([2**63 - 1, -(2**63), 2**63, -(2**63) - 1]),
    st.booleans(),
    st.none(),
    st.floats(),
    st.lists(st.integers(0, 3), max_size=2),
    st.sampled_from([Tone.LOW, Colour.RED]),
)


_KEYS = st.one_of(
    st.text(st.characters(max_codepoint=127), max_size=4),
    st.text(max_size=3),
    st.sampled_from(["k\x00", "\ud800", "caf\u00e9"]),
    st.integers(0, 3),
)
# kind= left out (the dataclass's own, or the error of a dict without one), a good one, or a bad one;
# "" and 0 are falsy but given: they are checked (and refused), never replaced by a derived kind.
_KIND_OPTIONS = st.sampled_from(
    [{}, {"kind": "given_kind"}, {"kind": None}, {"kind": "bad\nkind"}, {"kind": ""}, {"kind": 0}]
)
# Class names, so the derived kind varies: CamelCase ones, and one a character past the limit.
_CLASS_NAMES = st.one_of(st.from_regex(r"[A-Z][A-Za-z0-9]{0,12}", fullmatch=True), st.just("L" + "x" * 200))


@dataclasses.dataclass(init=False)
class _DataclassMeta(type):
    x: int = 1


class _OfDataclassMeta(metaclass=_DataclassMeta):
    """A class whose type is a dataclass: as args it is refused like any class."""


def _plain_value(value: Any) -> bool:
    if type(value) is str:
        return value.isascii() and "\x00" not in value
    if type(value) is int:
        return -(2**63) <= value < 2**63
    return value is None or type(value) is bool


@st.composite
def _args_and_kind(draw: st.DrawFn) -> tuple[Any, dict[str, Any], bool]:
    """Args (a dataclass instance, a dict, or something that is no args), the kind option, and
    whether the args are plain."""
    opts = draw(_KIND_OPTIONS)
    shape = draw(st.sampled_from(["dataclass", "dict", "other"]))
    if shape == "dataclass":
        values = draw(st.lists(_FIELD_VALUES, max_size=4))
        sample = dataclasses.make_dataclass(draw(_CLASS_NAMES), [f"f{i}" for i in range(len(values))])
        return sample(*values), opts, all(map(_plain_value, values))
    if shape == "dict":
        data = draw(st.dictionaries(_KEYS, _FIELD_VALUES, max_size=4))
        keys_plain = all(_plain_value(key) and type(key) is str for key in data)
        return data, opts, keys_plain and all(map(_plain_value, data.values()))
    other = draw(st.sampled_from([Letter, _OfDataclassMeta, [1], None, "text"]))
    return other, opts, False


def _functions_called(call: Any) -> set[str]:
    """The names of the Python functions ``call()`` runs (its exception, if any, swallowed)."""
    called: set[str] = set()

    def profile(frame: Any, event: str, _arg: Any) -> None:
        if event == "call":
            called.add(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        call()
    except (ValidationError, TypeError):
        pass
    finally:
        sys.setprofile(None)
    return called


def test_plain_args_take_a_short_path_to_the_same_job(db_url: str) -> None:
    """``insert_job`` with no option but ``kind`` prepares plain args (a dataclass, or a dict of plain
    values) on a short path (``plain_insert``): the same statement and parameters, the same row and
    ``Job``, the same error, as the full ``prepare_job``; and it does take that path (no ``coerce_args``)."""
    short = 0
    with psycopg.connect(db_url) as conn:

        @settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
        @given(_args_and_kind())
        def check(case: tuple[Any, dict[str, Any], bool]) -> None:
            nonlocal short
            args, opts, plain = case
            note(f"{args!r} {opts!r}")
            assert (plain_args(args) is not None) == plain
            # A dict takes the short path only with a kind to go with it.
            takes_short = plain and (opts.get("kind") is not None or not isinstance(args, dict))
            called = _functions_called(lambda: awa_bridge.insert_job_sync(conn, args, **opts))
            conn.rollback()
            assert ("coerce_args" not in called) == takes_short, sorted(called)
            try:
                expected = awa_bridge.prepare_job(args, **opts)
            except (ValidationError, TypeError) as exc:
                with pytest.raises(type(exc)) as raised:
                    awa_bridge.insert_job_sync(conn, args, **opts)
                assert str(raised.value) == str(exc)
                conn.rollback()
                return
            short += takes_short
            if takes_short:  # the same statement and parameters as the full path's
                plan = plain_insert(args, opts)
                assert plan is not None and (_INSERT_PLAIN, plan[0]) == expected.statement()
            job = awa_bridge.insert_job_sync(conn, args, **opts)
            full = awa_bridge.insert_job_sync(conn, expected)
            rows = conn.execute("SELECT id, CAST(args AS text) FROM awa.jobs WHERE id IN (%s, %s)", (job.id, full.id))
            texts = dict(rows.fetchall())
            assert texts[job.id] == texts[full.id]
            assert job == dataclasses.replace(full, id=job.id, created_at=job.created_at, run_at=job.run_at)
            conn.rollback()

        check()
    # The short path was taken and compared, not only the full one: 34-62 of the 400 draws in twelve
    # runs, the draws being random (kind="" and kind=0 raise on both paths and do not count).
    assert short >= 15


async def test_a_job_is_the_args_as_they_were_at_the_call(db_url: str) -> None:
    """``insert_job`` prepares at the call: args changed before the awaitable is awaited change
    neither the row nor the returned ``Job``, and two awaitables made before either is awaited keep
    their own (the short path copies the caller's dict and its own template), down to the lists and
    dicts of the ``Job``."""
    import asyncpg

    conn = await asyncpg.connect(db_url)
    try:
        first_args, second_args = {"n": 1, "to": "a@example.com"}, {"n": 2, "to": "b@example.com"}
        first = awa_bridge.insert_job(conn, first_args, kind="kept")
        second = awa_bridge.insert_job(conn, second_args, kind="kept")
        letter = Letter("c@example.com", 3, False)
        third = awa_bridge.insert_job(conn, letter)
        first_args["n"] = 99
        second_args.clear()
        letter.count = 99
        jobs = [await first, await second, await third]
        rows = {row["id"]: json.loads(row["args"]) for row in await conn.fetch("SELECT id, args FROM awa.jobs")}
    finally:
        await conn.close()
    assert [job.args for job in jobs] == [
        {"n": 1, "to": "a@example.com"},
        {"n": 2, "to": "b@example.com"},
        {"to": "c@example.com", "count": 3, "urgent": False, "note": None},
    ]
    assert [rows[job.id] for job in jobs] == [job.args for job in jobs]
    assert jobs[0].args is not first_args
    # Each Job's lists and dicts are its own: appending to one job's errors changes no other job's.
    jobs[0].errors.append("changed")
    jobs[0].metadata["changed"] = True
    jobs[0].tags.append("changed")
    for job in jobs[1:]:
        assert (job.errors, job.metadata, job.tags) == ([], {}, [])
