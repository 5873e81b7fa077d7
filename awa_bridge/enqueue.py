"""Transactional enqueue on the caller's own connection.

``prepare_job`` is the preparation path every driver shares: it validates,
derives the kind, computes the canonical JSON and the unique key, and picks
the initial state. The most common single enqueue (plain args, no option but
``kind=``) takes ``plain_insert`` instead, which gives the same row and
``Job`` with less code run (property-tested against ``prepare_job``).
``insert_job`` / ``insert_job_sync`` then run one statement on whatever
connection the caller holds; they never begin, commit or roll back, so the
job commits or rolls back with the caller's own rows.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any, TypeVar, overload

from .args import canonical_json, coerce_args, plain_args
from .conntypes import AsyncConnection, SyncConnection
from .drivers import detect_async, detect_sync, is_async_connection
from .drivers.base import AsyncDriver, Row, RowLike, SyncDriver
from .errors import UniqueConflict, ValidationError, constraint_of, missing_schema, sqlstate_of
from .foreign import UNIQUE_BULK_REFUSAL, check_async, check_sync
from .sql import QUERIES, Query
from .types import InsertManyResult, Job, JobState
from .unique import UniqueOpts, parse_unique, unique_key
from .validation import check_int, check_name, check_text, check_timestamp

_INSERT_ROW = QUERIES["insert_job"]
_INSERT_PLAIN = QUERIES["insert_plain_job"]
_INSERT_ORDERED = QUERIES["insert_ordered_job"]

MAX_TAGS = 20
PRIORITY_RANGE = (1, 4)
MAX_ATTEMPTS_RANGE = (1, 1000)
DEFAULT_QUEUE = "default"
DEFAULT_PRIORITY = 2
DEFAULT_MAX_ATTEMPTS = 25


@dataclass(frozen=True)
class PreparedJob:
    """A validated job, ready for any driver. Build it with ``prepare_job``."""

    kind: str
    queue: str
    args_json: str
    state: JobState
    priority: int
    max_attempts: int
    run_at: datetime | None
    metadata_json: str
    tags: tuple[str, ...]
    unique_key: bytes | None
    unique_states: str | None
    ordering_key: bytes | None

    def statement(self) -> tuple[Query, dict[str, Any]]:
        """The insert and its parameters: ``insert_plain_job`` for a job available now with every
        other option at its default (most jobs: three parameters instead of eleven),
        ``insert_ordered_job`` for one with an ordering key, else ``insert_job``."""
        if self.ordering_key is not None:
            return _INSERT_ORDERED, {**self.params(), "ordering_key": self.ordering_key}
        if (
            self.run_at is None
            and self.priority == DEFAULT_PRIORITY
            and self.max_attempts == DEFAULT_MAX_ATTEMPTS
            and self.metadata_json == "{}"
            and not self.tags
            and self.unique_key is None
        ):
            return _INSERT_PLAIN, {"kind": self.kind, "queue": self.queue, "args": self.args_json}
        return _INSERT_ROW, self.params()

    def params(self) -> dict[str, Any]:
        """Parameters of the ``insert_job`` query (every column a caller chooses)."""
        return {
            "kind": self.kind,
            "queue": self.queue,
            "args": self.args_json,
            "state": self.state.value,
            "priority": self.priority,
            "max_attempts": self.max_attempts,
            "run_at": self.run_at,
            "metadata": self.metadata_json,
            "tags": list(self.tags),
            "unique_key": self.unique_key,
            "unique_states": self.unique_states,
        }

    def inserted(self, row: RowLike) -> Job:
        """The ``Job`` this insert created: the database's id and times, our own values for the rest.

        The args come from the data ``prepare_job`` encoded when that data is
        flat (what ``json.loads`` of the JSON would give back, so there is no
        need to parse it again); anything else is decoded from the JSON text.
        """
        args = self.__dict__.get("_flat_args")
        # A copy of a dict of every field, then filled: a third faster than a dict display of them
        # (it is sized once, where a display grows and rehashes as it goes).
        values = _NEW_JOB.copy()
        values["id"] = row["id"]
        values["kind"] = self.kind
        values["queue"] = self.queue
        # A copy in the caller's key order (sorting it was a fifth of this method).
        values["args"] = dict(args) if args is not None else decode_json(self.args_json)
        values["state"] = self.state
        values["priority"] = self.priority
        values["max_attempts"] = self.max_attempts
        # The INSERTs read back created_at only: run_at is the caller's, else now(), which created_at
        # is too. awa.insert_job_compat (a job with an ordering key) returns both: awa-pg's takes
        # its own clock for run_at (queries.sql, insert_job). In UTC whatever the driver's time
        # zone (psycopg gives the session's); asyncpg's is UTC already, which astimezone returns.
        created_at = values["created_at"] = row["created_at"].astimezone(UTC)
        if self.ordering_key is not None:
            values["run_at"] = row["run_at"].astimezone(UTC)
        else:
            values["run_at"] = created_at if self.run_at is None else self.run_at.astimezone(UTC)
        values["errors"] = []
        values["metadata"] = decode_json(self.metadata_json)
        values["tags"] = list(self.tags)
        values["unique_key"] = self.unique_key
        values["unique_states"] = self.unique_states
        return _frozen(Job, values)


# Every field of a ``Job``, in field order, holding what a job that has just been inserted has for
# the columns no caller chooses; ``inserted`` fills in the rest (the None placeholders).
_NEW_JOB: dict[str, Any] = {
    **dict.fromkeys(field.name for field in fields(Job)),
    "attempt": 0,
    "run_lease": 0,
}

_T = TypeVar("_T")


def _frozen(cls: type[_T], values: dict[str, Any]) -> _T:
    """An instance of the frozen dataclass ``cls`` holding ``values`` (every field, nothing else).

    Its generated ``__init__`` sets each field through ``object.__setattr__``
    (about half a microsecond per field: 15 us for a ``Job``, a tenth of one
    single enqueue's own cost); filling the instance dict directly gives the
    same object (equal, hashable, still frozen) at a tenth of that. ``values``
    becomes the instance dict itself, not a copy: only for a dict this module
    has just built from values it checked itself.
    """
    instance = object.__new__(cls)
    object.__setattr__(instance, "__dict__", values)
    return instance


# Value types that JSON gives back unchanged (``json.loads(dumps(v)) == v``, same type).
_FLAT_JSON = frozenset({str, int, float, bool, type(None)})


def _flat(data: Any) -> bool:
    """True for a dict of string keys to flat values: its JSON decodes back to an equal dict."""
    return type(data) is dict and _FLAT_JSON.issuperset(map(type, data.values()))


def prepare_job(
    args: Any,
    *,
    kind: str | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int = DEFAULT_PRIORITY,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    run_at: datetime | str | None = None,
    metadata: Mapping[str, Any] | None = None,
    tags: Sequence[str] | None = None,
    unique: bool | Mapping[str, Any] | UniqueOpts | None = None,
    ordering_key: bytes | str | None = None,
) -> PreparedJob:
    """Validate a job and compute everything an insert needs, once.

    Raises ``ValidationError`` (naming the field and the limit) or
    ``TypeError`` for args of an unsupported type; nothing is written.
    """
    data, derived_kind = coerce_args(args)
    if kind is None:
        if derived_kind is None:
            raise ValidationError("kind", "dict args need an explicit kind= (for example kind='send_email')")
        kind = derived_kind
    check_name("kind", kind)
    # A default is the module's own constant (the very object), valid by construction: not re-checked.
    if queue is not DEFAULT_QUEUE:
        check_name("queue", queue)
    if priority is not DEFAULT_PRIORITY:
        check_int("priority", priority, *PRIORITY_RANGE)
    if max_attempts is not DEFAULT_MAX_ATTEMPTS:
        check_int("max_attempts", max_attempts, *MAX_ATTEMPTS_RANGE)
    args_json = canonical_json(data, "args")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise ValidationError("metadata", f"must be a dict, got {type(metadata).__name__}")
    metadata_json = canonical_json(dict(metadata), "metadata") if metadata else "{}"
    # The options most calls leave out are checked only when given (a call each saved).
    tag_tuple = _check_tags(tags) if tags is not None else ()
    run_at_dt = _normalize_run_at(run_at) if run_at is not None else None
    opts = parse_unique(unique) if unique is not None else None
    values = {
        "kind": kind,
        "queue": queue,
        "args_json": args_json,
        "state": JobState.scheduled if run_at_dt is not None else JobState.available,
        "priority": priority,
        "max_attempts": max_attempts,
        "run_at": run_at_dt,
        "metadata_json": metadata_json,
        "tags": tag_tuple,
        "unique_key": unique_key(kind, queue, args_json, opts) if opts else None,
        "unique_states": opts.states_bits if opts else None,
        "ordering_key": _normalize_ordering_key(ordering_key) if ordering_key is not None else None,
    }
    prepared = _frozen(PreparedJob, values)
    if _flat(data):
        # Not a field: kept for ``inserted`` only, invisible to ==, repr and dataclasses.replace.
        prepared.__dict__["_flat_args"] = data
    return prepared


def _check_tags(tags: Sequence[str] | None) -> tuple[str, ...]:
    if tags is None:
        return ()
    if isinstance(tags, str) or not isinstance(tags, Iterable):
        raise ValidationError("tags", "must be a list of strings")
    result = tuple(tags)
    if len(result) > MAX_TAGS:
        raise ValidationError("tags", f"has {len(result)} tags; the limit is {MAX_TAGS}")
    for index, tag in enumerate(result):
        check_text(f"tags[{index}]", tag)
    return result


def _normalize_run_at(run_at: datetime | str | None) -> datetime | None:
    if run_at is None:
        return None
    if isinstance(run_at, str):
        try:
            run_at = datetime.fromisoformat(run_at)
        except ValueError:
            raise ValidationError("run_at", f"{run_at!r} is not an ISO 8601 date-time") from None
    if not isinstance(run_at, datetime):
        raise ValidationError("run_at", f"must be a datetime or an ISO 8601 string, got {type(run_at).__name__}")
    return check_timestamp("run_at", run_at)


def _normalize_ordering_key(key: bytes | str | None) -> bytes | None:
    if key is None:
        return None
    if isinstance(key, str):
        return check_text("ordering_key", key).encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    raise ValidationError("ordering_key", f"must be bytes or str, got {type(key).__name__}")


_JSON_COLUMNS = ("args", "errors", "metadata", "progress")
_STATES = {state.value: state for state in JobState}


def decode_json(text: str) -> Any:
    """``json.loads``, with the parser skipped for ``{}`` and ``[]``.

    Most jobs carry empty metadata and no errors; the worker decodes the
    metadata of every job it claims, so the shortcut is paid back per job.
    """
    if text == "{}":
        return {}
    if text == "[]":
        return []
    return json.loads(text)


def decode_json_texts(texts: list[str]) -> list[Any]:
    """``[json.loads(t) for t in texts]`` in one parser call: the JSON texts joined into one array.

    For the args of a claimed batch (``jsonb::text`` from PostgreSQL, so each
    is one valid JSON value): per small value, most of ``json.loads`` is its
    own call overhead, paid here once per claim instead of once per job.
    """
    if not texts:
        return []
    values: list[Any] = json.loads("[" + ",".join(texts) + "]")
    return values


def row_to_job(row: Row) -> Job:
    """Build a ``Job`` from a row of any driver (JSON columns arrive as text)."""
    values = dict(row)
    for column in _JSON_COLUMNS:
        if isinstance(values.get(column), str):
            values[column] = decode_json(values[column])
    state = values["state"]
    values["state"] = _STATES.get(state) or JobState(state)
    values["errors"] = values.get("errors") or []
    values["tags"] = list(values.get("tags") or [])
    if values.get("unique_key") is not None:
        values["unique_key"] = bytes(values["unique_key"])
    if values.get("callback_id") is not None:
        values["callback_id"] = str(values["callback_id"])
    return Job(**values)


def _translate(exc: Exception, unique_key: bytes | None) -> Exception | None:
    """Map a driver error to ours (23505 → UniqueConflict, a missing awa table or type →
    SchemaNotMigrated), or None to re-raise as is. Called on the error path only."""
    if sqlstate_of(exc) == "23505":
        # One line: the driver's own error (with SQLAlchemy, its SQL and parameters too) stays the cause.
        detail = "the job was not inserted; like any failed statement this aborts the transaction"
        return UniqueConflict(unique_key, constraint_of(exc), detail)
    return missing_schema(exc)


#: The options of insert_job and insert_many: prepare_job's keywords.
OPTIONS = tuple(name for name in inspect.signature(prepare_job).parameters if name != "args")


def _check_options(opts: Mapping[str, Any]) -> None:
    """Refuse an option no insert takes by its own name (Python's error named ``prepare_job()``)."""
    for name in opts:
        if name not in OPTIONS:
            raise ValidationError(name, f"is not a job option; the options are {', '.join(OPTIONS)}")


def _as_prepared(args: Any, opts: dict[str, Any]) -> PreparedJob:
    if isinstance(args, PreparedJob):
        if opts:
            raise ValidationError("options", "pass options to prepare_job(), not with a PreparedJob")
        return args
    _check_options(opts)
    return prepare_job(args, **opts)


# A single insert: its statement, the statement's parameters, and how the Job is made from the row
# (finish(state, row)), with the unique key a duplicate would name.
_Plan = tuple[Query, dict[str, Any], Callable[[Any, RowLike], Job], Any, bytes | None]


def _plan(args: Any, opts: dict[str, Any]) -> _Plan:
    """What one ``insert_job`` sends and how it makes its ``Job``: ``plain_insert`` for plain args
    with no option but ``kind=``, else ``prepare_job`` (or the caller's ``PreparedJob``)."""
    plain = plain_insert(args, opts)
    if plain is not None:
        params, job = plain
        return _INSERT_PLAIN, params, inserted_plain, job, None
    prepared = _as_prepared(args, opts)
    query, params = prepared.statement()
    return query, params, PreparedJob.inserted, prepared, prepared.unique_key


# The Job a plain insert makes, but for its id and times (and the lists and dicts, made anew for
# each job): taken from prepare_job and inserted() themselves, so the defaults stay written once.
_PLAIN_NEW_JOB: dict[str, Any] = vars(
    prepare_job({}, kind="plain").inserted({"id": 0, "created_at": datetime(2000, 1, 1, tzinfo=UTC)})
).copy()


def plain_insert(args: Any, opts: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """For plain args (``plain_args``) and no option but ``kind=``: the parameters of
    ``insert_plain_job`` and the ``Job``'s fields but for the row's id and time; else None.

    The same row and ``Job`` as ``prepare_job`` and ``PreparedJob.inserted``
    give, without the ``PreparedJob``, ``statement()`` and the copies between
    them: the single enqueue most applications make, whose own cost is mostly
    code run cache-cold after the previous round trip, so what it does not
    touch is what it saves (7-19 us a call between round trips, about a third
    of its own cost: README, "Enqueue"). Anything else gives None and takes
    ``prepare_job``, which says what is wrong.
    """
    if opts and (len(opts) > 1 or "kind" not in opts):
        return None
    plain = plain_args(args)
    if plain is None:
        return None
    data, kind, args_json = plain
    given = opts.get("kind") if opts else None
    if given is not None:
        kind = given
    elif kind is None:
        return None  # dict args without a kind: prepare_job says what is missing
    job = _PLAIN_NEW_JOB.copy()
    job["kind"] = check_name("kind", kind)
    job["args"] = data  # plain_args' own copy: the caller's dict or dataclass is not kept
    job["errors"] = []
    job["metadata"] = {}
    job["tags"] = []
    return {"kind": kind, "queue": DEFAULT_QUEUE, "args": args_json}, job


def inserted_plain(job: dict[str, Any], row: RowLike) -> Job:
    """The ``Job`` of a plain insert (``plain_insert``): its fields, with the row's id and time.

    As ``PreparedJob.inserted`` for a job available now: ``run_at`` is ``created_at``, in UTC.
    """
    job["id"] = row["id"]
    job["created_at"] = job["run_at"] = row["created_at"].astimezone(UTC)
    return _frozen(Job, job)


@overload
def insert_job(conn: AsyncConnection, args: Any, **opts: Any) -> Coroutine[Any, Any, Job]: ...
@overload
def insert_job(conn: SyncConnection, args: Any, **opts: Any) -> Job: ...
def insert_job(conn: Any, args: Any, **opts: Any) -> Job | Coroutine[Any, Any, Job]:
    """Insert one job on the caller's connection, inside the caller's transaction.

    On a sync connection (psycopg ``Connection``, SQLAlchemy ``Connection`` /
    ``Session`` / ``scoped_session``, Django's connection) the job is written
    now and the ``Job`` returned. On an async one (asyncpg ``Connection`` or
    pooled, psycopg ``AsyncConnection``, SQLAlchemy ``AsyncConnection`` /
    ``AsyncSession``) an awaitable is returned: ``job = await insert_job(conn,
    args)``. Either way the arguments are validated at the call, so bad input
    raises ``ValidationError`` before anything reaches PostgreSQL. Options are
    those of ``prepare_job``. A duplicate unique key raises ``UniqueConflict``
    (and, as with any failed statement, aborts the caller's transaction or
    savepoint).
    """
    plan = _plan(args, opts)
    if is_async_connection(conn):
        return _insert_async(detect_async(conn), *plan)
    return _insert_sync(detect_sync(conn), *plan)


def insert_job_sync(conn: SyncConnection, args: Any, **opts: Any) -> Job:
    """``insert_job`` for sync connections only: an async connection is refused with a hint."""
    return _insert_sync(detect_sync(conn), *_plan(args, opts))


def _insert_sync(
    driver: SyncDriver,
    query: Query,
    params: dict[str, Any],
    finish: Callable[[Any, RowLike], Job],
    state: Any,
    unique_key: bytes | None,
) -> Job:
    try:
        row = driver.fetch_one(query, params)
    except Exception as exc:
        mapped = _translate(exc, unique_key)
        if mapped is None:
            raise
        raise mapped from exc
    assert row is not None  # the statement returns one row or raises
    return finish(state, row)


async def _insert_async(
    driver: AsyncDriver,
    query: Query,
    params: dict[str, Any],
    finish: Callable[[Any, RowLike], Job],
    state: Any,
    unique_key: bytes | None,
) -> Job:
    try:
        row = await driver.fetch_one(query, params)
    except Exception as exc:
        mapped = _translate(exc, unique_key)
        if mapped is None:
            raise
        raise mapped from exc
    assert row is not None  # the statement returns one row or raises
    return finish(state, row)


# -- bulk -------------------------------------------------------------------

_COPY_COLUMNS = (
    "kind",
    "queue",
    "args",
    "state",
    "priority",
    "max_attempts",
    "run_at",
    "metadata",
    "tags",
    "unique_key",
    "unique_states",
)
# A batch of plain jobs (_plain) copies only these and takes the rest from the table's defaults, as
# insert_plain_job does: a third of the columns to encode and send, and on psycopg's text COPY about
# a quarter off the COPY itself.
_PLAIN_COPY_COLUMNS = _COPY_COLUMNS[:3]


def _plain(job: PreparedJob) -> bool:
    """A job the table's defaults describe but for its kind, queue and args: the one test, which
    ``statement()`` makes on the single-insert path without a call (it chooses ``insert_plain_job``)."""
    return job.statement()[0] is _INSERT_PLAIN


def _copy_row(job: PreparedJob, now: datetime) -> tuple[Any, ...]:
    """A ``PreparedJob`` as a row in ``_COPY_COLUMNS`` order."""
    return (
        job.kind,
        job.queue,
        job.args_json,
        job.state.value,
        job.priority,
        job.max_attempts,
        job.run_at or now,
        job.metadata_json,
        list(job.tags),
        job.unique_key,
        job.unique_states,
    )


@dataclass
class _BulkRows:
    """The COPY rows of one ``insert_many`` call and the columns they fill."""

    rows: list[tuple[Any, ...]]
    columns: tuple[str, ...]
    any_unique: bool


def _bulk_rows(jobs: Iterable[Any], opts: dict[str, Any]) -> _BulkRows:
    """COPY rows for ``jobs``, validated exactly as ``prepare_job`` would.

    The options are shared by every args object, so they are validated once
    per kind: the first args object of each kind goes through ``prepare_job``
    (which checks everything) and later ones of that kind only have their own
    args checked, encoded and (with ``unique``) hashed. While every job is
    plain the rows hold only kind, queue and args; the first one that is not
    turns the rows so far into full ones, whose missing ``run_at`` is one
    timestamp per call, as ``now()`` would be in the database.
    """
    _check_options(opts)
    rows: list[tuple[Any, ...]] = []
    plain = True
    any_unique = False
    now = datetime.now(UTC)
    # derived kind -> (first job of that kind as a full row, its unique options)
    templates: dict[str | None, tuple[tuple[Any, ...], UniqueOpts | None]] = {}
    for index, item in enumerate(jobs):
        try:
            if isinstance(item, PreparedJob):
                job = _as_prepared(item, opts)
            else:
                data, derived_kind = coerce_args(item)
                template = templates.get(derived_kind)
                if template is not None:
                    row, unique_opts = template
                    args_json = canonical_json(data, "args")
                    if plain:
                        rows.append((row[0], row[1], args_json))
                    else:
                        key = unique_key(row[0], row[1], args_json, unique_opts) if unique_opts else None
                        rows.append((row[0], row[1], args_json, *row[3:9], key, row[10]))
                    continue
                job = prepare_job(item, **opts)
        except ValidationError as exc:
            raise ValidationError(f"jobs[{index}].{exc.field}", exc.message) from None
        if job.ordering_key is not None:
            raise ValidationError(f"jobs[{index}].ordering_key", "insert_many does not take ordering keys")
        full = _copy_row(job, now)
        if plain and not _plain(job):
            plain = False
            tail: tuple[Any, ...] = (
                JobState.available.value,
                DEFAULT_PRIORITY,
                DEFAULT_MAX_ATTEMPTS,
                now,
                "{}",
                [],
                None,
                None,
            )
            rows = [(*row, *tail) for row in rows]
        any_unique |= job.unique_key is not None
        rows.append(full[:3] if plain else full)
        if not isinstance(item, PreparedJob):
            templates[derived_kind] = (full, parse_unique(opts.get("unique")))
    return _BulkRows(rows, _PLAIN_COPY_COLUMNS if plain else _COPY_COLUMNS, any_unique)


def _bulk_plan(any_unique: bool) -> Iterator[tuple[str, Any]]:
    """The steps of a bulk insert, shared by the sync and async paths.

    Without unique keys rows are COPYed straight into ``awa.jobs``. With them
    they go through a temporary staging table and ``INSERT ... ON CONFLICT DO
    NOTHING``, which skips duplicates (against the table and within the batch).
    That needs our schema: on one awa-pg migrated the guard refuses the call
    (``ForeignSchema``) with one read, before anything is written.
    """
    if not any_unique:
        yield "copy", "awa.jobs"
        return
    yield "guard", UNIQUE_BULK_REFUSAL
    yield "query", "create_insert_stage"
    yield "query", "clear_insert_stage"
    yield "copy", "pg_temp.awa_insert_stage"
    yield "count", "insert_from_stage"
    yield "query", "clear_insert_stage"


@overload
def insert_many(conn: AsyncConnection, jobs: Iterable[Any], **opts: Any) -> Coroutine[Any, Any, InsertManyResult]: ...
@overload
def insert_many(conn: SyncConnection, jobs: Iterable[Any], **opts: Any) -> InsertManyResult: ...
def insert_many(
    conn: Any, jobs: Iterable[Any], **opts: Any
) -> InsertManyResult | Coroutine[Any, Any, InsertManyResult]:
    """Insert many jobs with COPY on the caller's connection, in the caller's transaction.

    ``jobs`` holds args objects (sharing ``opts``) or ``PreparedJob`` values;
    all are validated at the call. Unique duplicates are skipped and counted,
    not raised. Like ``insert_job``: on a sync connection it runs now and
    returns the ``InsertManyResult``, on an async one it returns an awaitable.
    """
    bulk = _bulk_rows(jobs, opts)
    if is_async_connection(conn):
        return _insert_many_async(detect_async(conn), bulk)
    return _insert_many_on(detect_sync(conn), bulk)


def insert_many_sync(conn: SyncConnection, jobs: Iterable[Any], **opts: Any) -> InsertManyResult:
    """``insert_many`` for sync connections only: an async connection is refused with a hint."""
    driver = detect_sync(conn)
    return _insert_many_on(driver, _bulk_rows(jobs, opts))


def _insert_many_on(driver: SyncDriver, bulk: _BulkRows) -> InsertManyResult:
    if not bulk.rows:
        return InsertManyResult(inserted=0, skipped_duplicates=0)
    inserted = len(bulk.rows)
    try:
        for step, target in _bulk_plan(bulk.any_unique):
            if step == "copy":
                driver.copy_rows(target, bulk.columns, bulk.rows)
            elif step == "guard":
                check_sync(driver, target)
            elif step == "count":
                inserted = int(driver.fetch_all(QUERIES[target])[0]["inserted"])
            else:
                driver.fetch_all(QUERIES[target])
    except Exception as exc:
        _raise_missing_schema(exc)
        raise
    return InsertManyResult(inserted=inserted, skipped_duplicates=len(bulk.rows) - inserted)


async def _insert_many_async(driver: AsyncDriver, bulk: _BulkRows) -> InsertManyResult:
    if not bulk.rows:
        return InsertManyResult(inserted=0, skipped_duplicates=0)
    inserted = len(bulk.rows)
    try:
        for step, target in _bulk_plan(bulk.any_unique):
            if step == "copy":
                await driver.copy_rows(target, bulk.columns, bulk.rows)
            elif step == "guard":
                await check_async(driver, target)
            elif step == "count":
                inserted = int((await driver.fetch_all(QUERIES[target]))[0]["inserted"])
            else:
                await driver.fetch_all(QUERIES[target])
    except Exception as exc:
        _raise_missing_schema(exc)
        raise
    return InsertManyResult(inserted=inserted, skipped_duplicates=len(bulk.rows) - inserted)


def _raise_missing_schema(exc: Exception) -> None:
    """Raise ``SchemaNotMigrated`` from ``exc`` when it is about a missing awa table or type."""
    schema = missing_schema(exc)
    if schema is not None:
        raise schema from exc
