"""Bad input gets a clear error naming the field and the limit, and writes nothing (R27)."""

from __future__ import annotations

import dataclasses
import decimal
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import awa_bridge
from awa_bridge import ValidationError
from awa_bridge.args import MAX_JSON_BYTES
from awa_bridge.worker import Client

from .conftest import count_rows


@dataclasses.dataclass
class Payload:
    items: list[Any]


@dataclasses.dataclass
class Reminder:
    """Plain-looking args (``insert_job`` without options tries its short path first)."""

    to: str
    count: int = 1


# A class whose derived kind is one character past the limit.
LongNamed = dataclasses.make_dataclass("L" + "x" * 200, [("to", str)])


class Custom:
    pass


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


_CYCLIC: dict[str, Any] = {}
_CYCLIC["me"] = _CYCLIC


# (case id, args, options, field named in the error, text the message must contain)
CASES: list[tuple[str, Any, dict[str, Any], str, str]] = [
    ("priority 0", {}, {"priority": 0}, "priority", "between 1 and 4"),
    ("priority 5", {}, {"priority": 5}, "priority", "between 1 and 4"),
    ("priority bool", {}, {"priority": True}, "priority", "integer"),
    ("max_attempts 0", {}, {"max_attempts": 0}, "max_attempts", "between 1 and 1000"),
    ("max_attempts 1001", {}, {"max_attempts": 1001}, "max_attempts", "between 1 and 1000"),
    ("queue 201 chars", {}, {"queue": "q" * 201}, "queue", "limit is 200"),
    ("kind 201 chars", {}, {"kind": "k" * 201}, "kind", "limit is 200"),
    ("empty queue", {}, {"queue": ""}, "queue", "empty"),
    ("21 tags", {}, {"tags": [f"t{i}" for i in range(21)]}, "tags", "limit is 20"),
    ("tag not str", {}, {"tags": ["ok", 3]}, "tags[1]", "string"),
    ("NUL in arg value", {"a": "x\x00y"}, {}, "args.a", "NUL"),
    ("NUL in arg key", {"a\x00": 1}, {}, "args (key", "NUL"),
    ("NUL nested deep", {"a": [{"b": {"c": ["ok", "\x00"]}}]}, {}, "args.a[0].b.c[1]", "NUL"),
    ("NUL in metadata value", {}, {"metadata": {"m": {"n": "\x00"}}}, "metadata.m.n", "NUL"),
    ("NUL in metadata key", {}, {"metadata": {"\x00": 1}}, "metadata (key", "NUL"),
    ("NUL in tag", {}, {"tags": ["a\x00"]}, "tags[0]", "NUL"),
    ("set is not JSON", {"s": {1, 2}}, {}, "args.s", "set is not JSON-serializable"),
    ("object is not JSON", {"o": Custom()}, {}, "args.o", "Custom is not JSON-serializable"),
    ("decimal is not JSON", {"d": decimal.Decimal("1.5")}, {}, "args.d", "Decimal"),
    ("nan", {"f": float("nan")}, {}, "args.f", "finite"),
    ("non-str key", {1: "x"}, {}, "args", "keys must be strings"),
    ("dataclass bad item", Payload(items=[1, object()]), {}, "args.items[1]", "not JSON-serializable"),
    ("NUL in a dataclass field", Reminder(to="a\x00b"), {}, "args.to", "NUL"),
    ("surrogate in a dataclass field", Reminder(to="\udc00"), {}, "args.to", "UTF-8"),
    ("dataclass int beyond int64", Reminder(to="a", count=2**63), {}, "args.count", "64-bit"),
    ("dataclass kind 201 chars", LongNamed(to="a"), {}, "kind", "limit is 200"),
    ("unknown unique option", {}, {"unique": {"by_quue": True}}, "unique", "unknown option 'by_quue'"),
    ("unique states unknown", {}, {"unique": {"states": ["done"]}}, "unique.states", "unknown state"),
    ("unique by_period str", {}, {"unique": {"by_period": "day"}}, "unique.by_period", "integer"),
    ("unique not a mapping", {}, {"unique": "yes"}, "unique", "expected True"),
    ("bad run_at string", {}, {"run_at": "tomorrow"}, "run_at", "ISO 8601"),
    ("bad run_at type", {}, {"run_at": 12}, "run_at", "datetime"),
    ("metadata not dict", {}, {"metadata": ["x"]}, "metadata", "must be a dict"),
    ("ordering key type", {}, {"ordering_key": 5}, "ordering_key", "bytes or str"),
    ("newline in queue", {}, {"queue": "a\nb"}, "queue", "control character"),
    ("escape in kind", {}, {"kind": "k\x1b[31m"}, "kind", "control character"),
    ("line separator in queue", {}, {"queue": "a\u2028b"}, "queue", "control character"),
    ("surrogate in kind", {}, {"kind": "k\ud800"}, "kind", "lone surrogate"),
    ("surrogate in queue", {}, {"queue": "\udfffq"}, "queue", "lone surrogate"),
    ("surrogate in tag", {}, {"tags": ["ok", "\udfff"]}, "tags[1]", "UTF-8"),
    ("surrogate in ordering key", {}, {"ordering_key": "\ud800"}, "ordering_key", "UTF-8"),
    ("surrogate in arg", {"a": ["\ud800"]}, {}, "args.a[0]", "UTF-8"),
    ("surrogate in metadata key", {}, {"metadata": {"\udc00": 1}}, "metadata (key", "UTF-8"),
    ("run_at before year 1 in UTC", {}, {"run_at": "0001-01-01T00:00:00+14:00"}, "run_at", "out of range"),
    ("run_at after 9999 in UTC", {}, {"run_at": "9999-12-31T23:00:00-05:00"}, "run_at", "out of range"),
    ("int beyond int64", {"n": 2**63}, {}, "args.n", "64-bit"),
    ("int below int64", {"n": [-(2**63) - 1]}, {}, "args.n[0]", "64-bit"),
    ("int beyond float range", {"n": 10**400}, {}, "args.n", "64-bit"),
    ("largest float", {"f": 1.7976931348623157e308}, {}, "args.f", "1e+308"),
    ("infinity", {"f": float("-inf")}, {}, "args.f", "finite"),
    ("nested 65 deep", {"a": _nested(64)}, {}, "args.a", "nested deeper than 64"),
    ("cyclic args", _CYCLIC, {}, "args", "nested deeper than 64"),
    ("cyclic metadata", {}, {"metadata": _CYCLIC}, "metadata", "contains itself"),
    # Past MAX_JSON_BYTES: the plain short path (ASCII strings), the full path (a nested list),
    # multi-byte text whose characters are fewer than the limit's bytes, and metadata.
    ("args over 16 MiB", {"blob": "x" * MAX_JSON_BYTES}, {}, "args", "limit is 16,777,216"),
    ("nested args over 16 MiB", {"rows": [["y" * 1024] * 1024] * 17}, {}, "args", "limit is 16,777,216"),
    ("multi-byte args over 16 MiB", {"t": "\u00e9" * (MAX_JSON_BYTES // 2)}, {}, "args", "limit is 16,777,216"),
    ("metadata over 16 MiB", {}, {"metadata": {"m": "z" * MAX_JSON_BYTES}}, "metadata", "limit is 16,777,216"),
]


def _with_kind(args: Any, opts: dict[str, Any]) -> dict[str, Any]:
    if isinstance(args, dict) and "kind" not in opts:
        return {"kind": "validated", **opts}
    return opts


@pytest.mark.parametrize(("case", "args", "opts", "field", "text"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_rejected_and_writes_nothing(
    db_url: str, case: str, args: Any, opts: dict[str, Any], field: str, text: str
) -> None:
    with psycopg.connect(db_url) as conn:
        with pytest.raises(ValidationError) as info:
            awa_bridge.insert_job_sync(conn, args, **_with_kind(args, opts))
        assert info.value.field.startswith(field), info.value
        assert text in str(info.value)
        # The caller's transaction is untouched: it can go on and commit.
        conn.execute("INSERT INTO app_orders (note) VALUES ('after error')")
        conn.commit()
    assert count_rows(db_url) == 0
    assert count_rows(db_url, "SELECT count(*) FROM app_orders") == 1


@pytest.mark.parametrize(("case", "args", "opts", "field", "text"), CASES[:6], ids=[c[0] for c in CASES[:6]])
async def test_bad_input_async_path(
    db_url: str, case: str, args: Any, opts: dict[str, Any], field: str, text: str
) -> None:
    import asyncpg

    conn = await asyncpg.connect(db_url)
    try:
        with pytest.raises(ValidationError, match=text):
            await awa_bridge.insert_job(conn, args, **_with_kind(args, opts))
    finally:
        await conn.close()
    assert count_rows(db_url) == 0


def test_bulk_error_names_the_row_and_writes_nothing(db_url: str) -> None:
    rows = [{"i": 1}, {"i": 2}, {"i": "bad\x00"}]
    with psycopg.connect(db_url) as conn, pytest.raises(ValidationError) as info:
        awa_bridge.insert_many_sync(conn, rows, kind="bulk")
    assert info.value.field == "jobs[2].args.i"
    assert count_rows(db_url) == 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda conn: awa_bridge.insert_job_sync(conn, {"a": 1}), "explicit kind"),
        (lambda conn: awa_bridge.insert_job_sync(conn, ["not", "args"], kind="k"), "dataclass"),
        (lambda conn: awa_bridge.insert_job_sync(conn, {"a": 1}, kind="k", colour="red"), "^colour: is not a job"),
        (lambda conn: awa_bridge.insert_many_sync(conn, [{"a": 1}], kind="k", colour="red"), "^colour: is not a job"),
    ],
    ids=["dict without kind", "list args", "unknown option", "unknown bulk option"],
)
def test_missing_kind_wrong_args_type_and_unknown_option(db_url: str, call: Callable[[Any], Any], message: str) -> None:
    with psycopg.connect(db_url) as conn, pytest.raises((ValidationError, TypeError), match=message):
        call(conn)
    assert count_rows(db_url) == 0


def test_boundaries_are_accepted(db_url: str) -> None:
    from datetime import UTC, datetime

    with psycopg.connect(db_url) as conn:
        edges = {"deep": _nested(63), "i": [2**63 - 1, -(2**63)], "f": [1e308, -1e308, 5e-324]}
        awa_bridge.insert_job_sync(conn, edges, kind="k", run_at=datetime(1, 1, 2, tzinfo=UTC))
        awa_bridge.insert_job_sync(conn, {}, kind="Käse Brot", run_at="9999-12-30T00:00:00+00:00")
        for priority in (1, 4):
            awa_bridge.insert_job_sync(conn, {}, kind="k" * 200, queue="q" * 200, priority=priority)
        for attempts in (1, 1000):
            awa_bridge.insert_job_sync(conn, {}, kind="k", max_attempts=attempts, tags=["t"] * 20)
        conn.commit()
    assert count_rows(db_url) == 6


def test_pydantic_model_args(db_url: str) -> None:
    import datetime

    import pydantic

    class ResizeImage(pydantic.BaseModel):
        url: str
        when: datetime.date

    with psycopg.connect(db_url) as conn:
        job = awa_bridge.insert_job_sync(conn, ResizeImage(url="u", when=datetime.date(2030, 1, 2)))
        conn.commit()
    assert job.kind == "resize_image"
    assert job.args == {"url": "u", "when": "2030-01-02"}


SQLALCHEMY_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/shop"


@pytest.mark.parametrize(
    "call",
    [
        lambda: awa_bridge.migrate(SQLALCHEMY_URL),
        lambda: awa_bridge.admin.queue_stats(SQLALCHEMY_URL),
        lambda: Client(SQLALCHEMY_URL),
    ],
    ids=["migrate", "admin.queue_stats", "Client"],
)
def test_a_sqlalchemy_url_is_refused_by_name_before_any_driver_reads_it(call: Callable[[], Any]) -> None:
    """A SQLAlchemy application's URL once reached libpq, which said only "missing '=' after ...";
    the CLI already said what to do, and now the functions that take a URL say the same."""
    with pytest.raises(ValidationError, match=r"^url: the database URL has the SQLAlchemy scheme 'postgresql\+async"):
        call()
