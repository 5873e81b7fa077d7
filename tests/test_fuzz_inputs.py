"""Hostile input, fuzzed over every supported connection type (R27).

Each example builds one job (or a batch) with exactly one bad value in a known
place: hostile strings (NUL, control characters, line separators, lone
surrogates, empty, too long, not strings), numbers awa-pg cannot read (ints
beyond int64, non-finite and out-of-range floats), nesting past the limit,
structures that contain themselves, timestamps outside PostgreSQL's and
Python's common range, and options of the wrong type. For every driver in
tests/drivers.py the insert must raise ``ValidationError`` naming that place
(or ``TypeError`` for args of a type that is not a job at all), write nothing,
and leave the caller's transaction usable: an app row written before and one
after the refusal both commit.

The number of examples is bounded (``EXAMPLES`` per driver and entry point)
so the whole module runs in seconds in CI.
"""

from __future__ import annotations

import asyncio
import dataclasses
import decimal
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from awa_bridge import ValidationError

from .conftest import count_rows
from .drivers import HANDLES, Handle

EXAMPLES = 80

_OK_CHARS = st.characters(exclude_categories=("Cc", "Cs", "Zl", "Zp"))
_OK_TEXT = st.text(_OK_CHARS, max_size=8)
_OK_NAME = st.text(_OK_CHARS, min_size=1, max_size=12)
_BAD_NAME_CHARS = st.sampled_from(
    ["\x00", "\n", "\r", "\t", "\x1b", "\x7f", "\x85", "\u2028", "\u2029", "\ud800", "\udfff"]
)
_BAD_TEXT_CHARS = st.sampled_from(["\x00", "\ud800", "\udbff", "\udc00", "\udfff"])
_NOT_STRINGS = st.one_of(
    st.none(), st.integers(), st.floats(), st.binary(max_size=4), st.lists(st.integers(), max_size=2)
)


def _spliced(chars: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.builds(lambda a, c, b: a + c + b, _OK_TEXT, chars, _OK_TEXT)


_BAD_NAMES = st.one_of(
    _spliced(_BAD_NAME_CHARS),
    st.just(""),
    st.integers(201, 300).map(lambda n: "q" * n),
    _NOT_STRINGS.filter(lambda v: v is not None),
)
_BAD_TEXT = st.one_of(_spliced(_BAD_TEXT_CHARS), _NOT_STRINGS)


def _nest(depth: int, leaf: Any, as_dict: bool) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"n": value} if as_dict else [value]
    return value


def _cyclic(as_dict: bool) -> Any:
    if as_dict:
        d: dict[str, Any] = {}
        d["self"] = d
        return d
    lst: list[Any] = []
    lst.append(lst)
    return lst


_BAD_ACYCLIC = st.one_of(
    st.integers(min_value=2**63),
    st.integers(max_value=-(2**63) - 1),
    st.just(10**400),
    st.sampled_from(
        [float("nan"), float("inf"), float("-inf"), 1.7976931348623157e308, -1.5e308, 1.0000000000000002e308]
    ),
    _spliced(_BAD_TEXT_CHARS),
    st.sampled_from([{1, 2}, b"bytes", decimal.Decimal("1.5"), datetime(2024, 1, 1), object(), 1j]),
    st.builds(_nest, st.integers(64, 150), st.just(1), st.booleans()),
)
_BAD_JSON_LEAVES = st.one_of(
    _BAD_ACYCLIC,
    st.builds(_cyclic, st.booleans()),
    st.builds(lambda k: {k: 1}, st.one_of(st.integers(), st.none(), st.tuples(st.integers()))),
    st.builds(lambda k: {k: 1}, _spliced(_BAD_TEXT_CHARS)),
)
_GOOD_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(-1e300, 1e300) | _OK_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_OK_TEXT, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def _bad_json(draw: st.DrawFn) -> Any:
    """A bad leaf buried 0-4 levels deep inside otherwise good data."""
    value = draw(_BAD_JSON_LEAVES)
    for _ in range(draw(st.integers(0, 4))):
        key = "k" + draw(_OK_TEXT)
        value = {key: value, "ok": draw(_GOOD_JSON)} if draw(st.booleans()) else [draw(_GOOD_JSON), value]
    return {"payload": value}


_FAR_EAST = st.integers(1, 14).map(lambda h: timezone(timedelta(hours=h)))
_FAR_WEST = st.integers(1, 12).map(lambda h: timezone(timedelta(hours=-h)))
_BAD_RUN_AT = st.one_of(
    st.builds(lambda hh, tz: datetime(1, 1, 1, hh, tzinfo=tz), st.integers(0, 23), _FAR_EAST),
    st.builds(lambda hh, tz: datetime(9999, 12, 31, hh, tzinfo=tz), st.integers(0, 23), _FAR_WEST),
    st.builds(lambda hh, tz: datetime(1, 1, 1, hh, tzinfo=tz).isoformat(), st.integers(0, 23), _FAR_EAST),
    st.sampled_from(["tomorrow", "", "0000-01-01T00:00:00", "2024-13-01T00:00:00"]),
    st.one_of(st.integers(), st.floats(), st.just(b"2024-01-01")),
)
_BAD_INT_OPTION = st.one_of(
    st.integers(max_value=0),
    st.integers(min_value=1001),
    st.just(2**70),
    st.floats(),
    st.booleans(),
    st.text(max_size=3),
    st.none(),
)


@dataclasses.dataclass
class Looped:
    items: list[Any]


def _looped() -> Looped:
    job = Looped(items=[])
    job.items.append(job)
    return job


@dataclasses.dataclass
class Notice:
    """Args that look plain (what ``insert_job`` without options prepares on its short path) but for one field."""

    to: str
    value: Any
    count: int = 1


@st.composite
def bad_job(draw: st.DrawFn) -> tuple[Any, dict[str, Any], str]:
    """(args, options, the field the error must name); exactly one thing is bad."""
    args: Any = {"ok": draw(_GOOD_JSON)}
    opts: dict[str, Any] = {"kind": draw(_OK_NAME)}
    where = draw(
        st.sampled_from(
            [
                *("kind", "queue", "tags", "tag", "ordering_key", "args", "metadata", "run_at"),
                *("priority", "max_attempts", "unique", "args_type", "looped", "field"),
            ]
        )
    )
    if where in ("kind", "queue"):
        opts[where] = draw(_BAD_NAMES)
        return args, opts, where
    if where == "tags":
        opts["tags"] = draw(st.one_of(st.integers(), st.just("a,b"), st.lists(_OK_NAME, min_size=21, max_size=25)))
        return args, opts, "tags"
    if where == "tag":
        bad = draw(_BAD_TEXT)
        index = draw(st.integers(0, 3))
        opts["tags"] = [f"t{i}" for i in range(index)] + [bad]
        return args, opts, f"tags[{index}]"
    if where == "ordering_key":
        opts["ordering_key"] = draw(
            st.one_of(
                _spliced(st.sampled_from(["\ud800", "\udfff"])), st.integers(), st.lists(st.integers(), max_size=2)
            )
        )
        return args, opts, "ordering_key"
    if where == "args":
        return draw(_bad_json()), opts, "args"
    if where == "metadata":
        opts["metadata"] = draw(st.one_of(_bad_json(), st.lists(st.integers(), max_size=2), st.integers()))
        return args, opts, "metadata"
    if where == "run_at":
        opts["run_at"] = draw(_BAD_RUN_AT)
        return args, opts, "run_at"
    if where in ("priority", "max_attempts"):
        value = draw(_BAD_INT_OPTION)
        if where == "priority":
            value = draw(st.one_of(st.just(value), st.integers(5, 2**20)))
        opts[where] = value
        return args, opts, where
    if where == "unique":
        opts["unique"] = draw(
            st.one_of(
                st.text(min_size=1, max_size=3),
                st.integers(),
                st.just({"by_quue": True}),
                st.just({"states": ["done"]}),
                st.builds(lambda p: {"by_period": p}, st.one_of(st.integers(min_value=2**63), st.text(max_size=2))),
            )
        )
        return args, opts, "unique"
    if where == "looped":
        opts.pop("kind")
        return _looped(), opts, "args"
    if where == "field":
        return Notice(to="a@example.com", value=draw(_BAD_ACYCLIC)), {}, "args.value"
    return draw(st.one_of(st.lists(st.integers(), max_size=2), st.integers(), st.text(max_size=3), st.none())), opts, ""


def _check_refusal(exc: BaseException, expected: str, bulk: bool) -> None:
    if isinstance(exc, TypeError) and not isinstance(exc, ValidationError):
        assert expected == "", f"TypeError {exc} for a bad {expected!r}"
        return
    assert isinstance(exc, ValidationError), repr(exc)
    field = exc.field
    if bulk:
        match = re.match(r"jobs\[\d+\]\.", field)
        assert match, f"bulk error does not name the row: {field!r}"
        field = field[match.end() :]
    assert field.startswith(expected), f"error names {exc.field!r}, expected {expected!r}: {exc}"


class _Runner:
    """One driver's connection on one event loop, shared by every example."""

    def __init__(self, name: str, url: str) -> None:
        # Django's steps never suspend; they run in this context, not in a task
        # per step (each task would get its own context-local connection).
        self.inline = name == "django"
        self.loop = asyncio.new_event_loop()
        self.handle: Handle = HANDLES[name]()
        self.run(self.handle.open(url))
        self.examples = 0

    def run(self, coro: Any) -> Any:
        if not self.inline:
            return self.loop.run_until_complete(coro)
        try:
            coro.send(None)
        except StopIteration as done:
            return done.value
        raise AssertionError("a Django step suspended")

    def refused(self, call: Any, expected: str, bulk: bool) -> None:
        """Run ``call`` between two app rows in one transaction, and commit."""
        self.run(self.handle.begin())
        self.run(self.handle.app_row("before"))
        try:
            self.run(call())
        except (ValidationError, TypeError) as exc:
            _check_refusal(exc, expected, bulk)
        else:
            raise AssertionError(f"bad {expected or 'args type'} was accepted")
        self.run(self.handle.app_row("after"))  # the transaction is still usable
        self.run(self.handle.commit())
        self.examples += 1

    def close(self) -> None:
        self.run(self.handle.close())
        self.loop.close()


@pytest.fixture(params=sorted(HANDLES))
def runner(request: pytest.FixtureRequest, db_url: str) -> Any:
    if request.param == "django":
        request.getfixturevalue("django_setup")
    made = _Runner(request.param, db_url)
    yield made
    made.close()


_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _assert_nothing_written(url: str, runner: _Runner) -> None:
    assert count_rows(url) == 0
    assert count_rows(url, "SELECT count(*) FROM app_orders") == 2 * runner.examples


def test_insert_job_refuses_hostile_input(runner: _Runner, db_url: str) -> None:
    @_SETTINGS
    @given(bad_job())
    def check(case: tuple[Any, dict[str, Any], str]) -> None:
        args, opts, expected = case
        note(f"args={args!r:.300} opts={opts!r:.300}")
        runner.refused(lambda: runner.handle.insert(args, **opts), expected, bulk=False)

    check()
    _assert_nothing_written(db_url, runner)


def test_insert_many_refuses_hostile_input(runner: _Runner, db_url: str) -> None:
    @_SETTINGS
    @given(bad_job(), st.integers(0, 3), st.booleans())
    def check(case: tuple[Any, dict[str, Any], str], position: int, unique: bool) -> None:
        args, opts, expected = case
        if expected == "ordering_key":
            return  # insert_many takes no ordering keys at all (tested in test_validation)
        if expected in ("args", "") and "kind" in opts:
            # A bad args object among good ones sharing the options.
            if unique and expected == "args" and "unique" not in opts:
                opts["unique"] = True
            jobs = [{"ok": i} for i in range(position)] + [args] + [{"ok": -1}]
        else:
            jobs = [args, {"ok": 2}]
        note(f"jobs={jobs!r:.300} opts={opts!r:.300}")
        runner.refused(lambda: runner.handle.insert_many(jobs, **opts), expected, bulk=expected != "")

    check()
    _assert_nothing_written(db_url, runner)
