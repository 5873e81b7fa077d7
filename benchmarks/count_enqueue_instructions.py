"""Client-side CPU instructions per single enqueue, counted by valgrind: figures a busy machine cannot skew.

Wall-clock rates on a shared machine move with everyone else's load; the
instructions the client process executes per call do not. Each case runs
twice under ``valgrind --tool=callgrind`` (``--small`` and ``--large`` calls,
in a child process of this script), and the difference of the two totals
divided by the difference of the call counts is the cost of one call, start-up
excluded. It counts the Python process only (the interpreter, the driver,
the event loop and the system-call entry), not PostgreSQL's side of the
statement. A second table takes ``insert_job``'s own client path apart
(the short path of plain args and ``prepare_job``'s full one, the statement,
the returned ``Job``), with no database, each part one step more than the part it builds on.

    python benchmarks/count_enqueue_instructions.py --database-url postgresql://postgres@127.0.0.1:5432/postgres

It works in a throwaway database beside ``--database-url`` (dropped at the
end). Run it with ``PYTHONPATH=/path/to/other/checkout`` to count another
version of awa_bridge against the same peers. Needs valgrind; pgqueuer is
counted when installed (see requirements.txt).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

import bench_procs as bp
import psycopg

BARE = "INSERT INTO awa.jobs (kind, queue, args) VALUES ($1, $2, $3) RETURNING id"
BARE_PSYCOPG = "INSERT INTO awa.jobs (kind, queue, args) VALUES (%s, %s, %s) RETURNING id"


@dataclass
class SendEmail:
    to: str
    subject: str
    n: int


def _json(n: int) -> str:
    """The bare INSERT's args, encoded as an application would (``bench_enqueue.dumps``)."""
    return json.dumps({"to": "a@example.com", "subject": "Hi", "n": n})


async def _asyncpg_case(url: str, case: str, calls: int) -> None:
    import asyncpg

    import awa_bridge
    from awa_bridge.worker import Client

    if case == "Client.insert":
        client = Client(url)
        for n in range(calls):
            await client.insert(SendEmail("a@example.com", "Hi", n))
        await client.shutdown()
        return
    conn = await asyncpg.connect(url)
    step: Callable[[int], Awaitable[Any]]
    if case == "bare INSERT, asyncpg":
        step = lambda n: conn.fetchval(BARE, "send_email", "default", _json(n))  # noqa: E731
    elif case == "insert_job, asyncpg":
        step = lambda n: awa_bridge.insert_job(conn, SendEmail("a@example.com", "Hi", n))  # noqa: E731
    else:
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        queries = Queries(AsyncpgDriver(conn))
        step = lambda n: queries.enqueue("send_email", _json(n).encode())  # noqa: E731
    for n in range(calls):
        await step(n)
    await conn.close()


async def _psycopg_async_case(url: str, case: str, calls: int) -> None:
    import awa_bridge

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for n in range(calls):
            if case == "bare INSERT, psycopg-async":
                await (await conn.execute(BARE_PSYCOPG, ("send_email", "default", _json(n)))).fetchone()
            else:
                await awa_bridge.insert_job(conn, SendEmail("a@example.com", "Hi", n))


def _psycopg_case(url: str, case: str, calls: int) -> None:
    import awa_bridge

    with psycopg.connect(url, autocommit=True) as conn:
        for n in range(calls):
            if case == "bare INSERT, psycopg":
                conn.execute(BARE_PSYCOPG, ("send_email", "default", _json(n))).fetchone()
            else:
                awa_bridge.insert_job_sync(conn, SendEmail("a@example.com", "Hi", n))


def _sqlalchemy_case(url: str, case: str, calls: int) -> None:
    """On a SQLAlchemy ``Session`` (psycopg dialect, engine in autocommit): the ORM code's door."""
    import sqlalchemy as sa
    from sqlalchemy.orm import Session

    import awa_bridge

    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT")
    bare = sa.text("INSERT INTO awa.jobs (kind, queue, args) VALUES (:kind, :queue, :args) RETURNING id")
    with Session(engine) as session:
        for n in range(calls):
            if case == "bare INSERT, SQLAlchemy":
                session.execute(bare, {"kind": "send_email", "queue": "default", "args": _json(n)}).scalar_one()
            else:
                awa_bridge.insert_job(session, SendEmail("a@example.com", "Hi", n))
    engine.dispose()


def _django_case(url: str, case: str, calls: int) -> None:
    """On ``django.db.connection`` (autocommit, Django's default outside ``atomic()``)."""
    from bench_enqueue import configure_django  # a sibling script

    import awa_bridge

    configure_django(url)
    from django.db import connection

    for n in range(calls):
        if case == "bare INSERT, Django":
            with connection.cursor() as cursor:
                cursor.execute(BARE_PSYCOPG, ("send_email", "default", _json(n)))
                cursor.fetchone()
        else:
            awa_bridge.insert_job(connection, SendEmail("a@example.com", "Hi", n))
    connection.close()


CASES = [
    "bare INSERT, asyncpg",
    "insert_job, asyncpg",
    "Client.insert",
    "pgqueuer enqueue, asyncpg",
    "bare INSERT, psycopg",
    "insert_job_sync, psycopg",
    "bare INSERT, psycopg-async",
    "insert_job, psycopg-async",
    "bare INSERT, SQLAlchemy",
    "insert_job, SQLAlchemy",
    "bare INSERT, Django",
    "insert_job, Django",
]


# insert_job's client path taken apart, no database: each part adds one step to the part it names,
# so the difference of the two is what that step costs. The args object is made in every part. Plain
# args (insert_job with no option but kind) take the short path (plain_args); with any other option
# they take prepare_job's full path, counted in the last four parts.
ARGS_ALONE = "the args object (a dataclass) alone"
PLAIN = "+ plain_args (fields read and checked, the sorted JSON text)"
PREPARED = "= what insert_job makes of plain args: the statement's parameters, the Job's fields (plain_insert)"
INSERTED = "+ inserted_plain() (the returned Job, from the row)"
COERCE = "full path: args + coerce_args (its fields read into a dict, its kind)"
CANONICAL = "full path: + canonical_json (validation and the sorted JSON text)"
PREPARE_JOB = "full path: = prepare_job (+ name check, the PreparedJob)"
FULL_INSERTED = "full path: + statement(), its asyncpg parameters and inserted() (the returned Job)"
# part -> the part it adds a step to
PARTS: dict[str, str | None] = {
    ARGS_ALONE: None,
    PLAIN: ARGS_ALONE,
    PREPARED: PLAIN,
    INSERTED: PREPARED,
    COERCE: ARGS_ALONE,
    CANONICAL: COERCE,
    PREPARE_JOB: CANONICAL,
    FULL_INSERTED: PREPARE_JOB,
}


def _parts_case(case: str, calls: int) -> None:
    from datetime import UTC, datetime

    from awa_bridge import prepare_job
    from awa_bridge.args import canonical_json, coerce_args, plain_args
    from awa_bridge.enqueue import inserted_plain, plain_insert

    row = {"id": 1, "created_at": datetime.now(UTC)}
    # Decided once: string comparisons in the loop would add to every part's count.
    plain, short, inserted = case == PLAIN, case in (PREPARED, INSERTED), case == INSERTED
    coerce, canonical = case in (COERCE, CANONICAL), case == CANONICAL
    full, full_inserted = case in (PREPARE_JOB, FULL_INSERTED), case == FULL_INSERTED
    for n in range(calls):
        args = SendEmail("a@example.com", "Hi", n)
        if plain:
            plain_args(args)
        elif short:
            planned = plain_insert(args, {})
            if inserted:
                assert planned is not None
                inserted_plain(planned[1], row)
        elif coerce:
            data, _kind = coerce_args(args)
            if canonical:
                canonical_json(data, "args")
        elif full:
            prepared = prepare_job(args)
            if full_inserted:
                query, params = prepared.statement()
                query.positional(params)
                prepared.inserted(row)


def run_case(url: str, case: str, calls: int) -> None:
    """The child's work: ``calls`` single enqueues of ``case`` on an autocommit connection."""
    if case in PARTS:
        _parts_case(case, calls)
    elif case.endswith("psycopg"):
        _psycopg_case(url, case, calls)
    elif case.endswith("SQLAlchemy"):
        _sqlalchemy_case(url, case, calls)
    elif case.endswith("Django"):
        _django_case(url, case, calls)
    elif case.endswith("psycopg-async"):
        asyncio.run(_psycopg_async_case(url, case, calls))
    else:
        asyncio.run(_asyncpg_case(url, case, calls))


def callgrind(
    program: Sequence[str], label: str, *, run_as: Sequence[str] = (), stdin: IO[str] | None = None
) -> tuple[int, str]:
    """Instructions ``program`` executes under valgrind's callgrind, and its standard output.

    ``run_as`` goes before valgrind (``runuser -u postgres --`` for a server
    that refuses root). Only the total is read, from valgrind's own summary,
    so the profile itself is not kept. A Python program runs with one fixed
    hash seed: with a random one, two runs of the same child differed by
    close to a million instructions (the order of its sets and dicts), a
    third of what a thousand calls of the smallest part cost.
    """
    command = [*run_as, "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *program]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    # Its own process group, killed whole when this one is interrupted: behind ``runuser`` the program
    # is a grandchild, which killing the child alone would leave running.
    with subprocess.Popen(
        command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    ) as proc:
        try:
            out, err = proc.communicate()
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, command, out, err)
    found = re.search(r"Collected : ([\d,]+)", err)
    if found is None:
        raise RuntimeError(f"no instruction count from valgrind for {label!r}: {err[-500:]}")
    return int(found.group(1).replace(",", "")), out


def instructions(url: str, case: str, calls: int) -> int:
    child = [sys.executable, __file__, "--child", case, "--calls", str(calls), "--database-url", url]
    return callgrind(child, case)[0]


def per_call(url: str, case: str, args: argparse.Namespace) -> int:
    """Instructions of one call of ``case``: the difference of a ``--large`` and a ``--small`` run."""
    return (instructions(url, case, args.large) - instructions(url, case, args.small)) // (args.large - args.small)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL"),
        help="a server to work beside: a throwaway database is created and migrated there, then dropped",
    )
    parser.add_argument("--small", type=int, default=100, help="calls in the shorter run (default 100)")
    parser.add_argument("--large", type=int, default=1100, help="calls in the longer run (default 1100)")
    parser.add_argument("--only", default="", help="comma-separated substrings: count only the cases matching one")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.database_url:
        parser.error("--database-url (or DATABASE_URL) is required")
    if args.child:
        run_case(args.database_url, args.child, args.calls)
        return
    check_sizes(parser, args)
    bp.check_server(args.database_url)
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed")
    with throwaway_database(args.database_url, f"awa_count_{os.getpid()}") as url:
        count(args, url)


def check_sizes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--large`` more than ``--small``, at least 1: the counts differ by a positive number of calls."""
    bp.require_positive(parser, args, "--small")
    if args.large <= args.small:
        parser.error("--large must be more than --small")


@contextlib.contextmanager
def throwaway_database(server_url: str, name: str) -> Iterator[str]:
    """Create database ``name`` on ``server_url``'s server, yield its URL, drop it (also after an error)."""
    try:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        yield urlunsplit(urlsplit(server_url)._replace(path="/" + name))
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _install_pgqueuer(url: str) -> bool:
    try:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries
    except ImportError:
        return False

    async def install() -> None:
        conn = await asyncpg.connect(url)
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()

    asyncio.run(install())
    return True


def count(args: argparse.Namespace, url: str) -> None:
    """Print the table for a throwaway database at ``url`` (awa_bridge's schema and pgqueuer's)."""
    import awa_bridge

    awa_bridge.migrate(url)
    cases = CASES if _install_pgqueuer(url) else [case for case in CASES if not case.startswith("pgqueuer")]
    if args.only:
        cases = [case for case in cases if any(part in case for part in args.only.split(","))]
    print(f"awa_bridge from {os.path.dirname(awa_bridge.__file__)}")
    print()
    print(
        "| case (autocommit, one call = one statement) | client instructions per call | x bare INSERT (same driver) |"
    )
    print("|---|---:|---:|")
    bare: dict[str, int] = {}
    for case in cases:
        cost = per_call(url, case, args)
        driver = case.rsplit(", ", 1)[-1] if ", " in case else "asyncpg"
        if case.startswith("bare"):
            bare[driver] = cost
        ratio = f"{cost / bare[driver]:.2f}" if driver in bare else "-"
        print(f"| {case} | {cost:,} | {ratio} |", flush=True)
    parts = [part for part in PARTS if not args.only or any(bit in part for bit in args.only.split(","))]
    if not parts:
        return
    print()
    print("| insert_job's client path, part by part (no database) | client instructions per call | this step |")
    print("|---|---:|---:|")
    costs: dict[str, int] = {}
    for part in parts:
        cost = costs[part] = per_call(url, part, args)
        base = PARTS[part]
        step = f"{cost - costs[base]:,}" if base in costs else "-"
        print(f"| {part} | {cost:,} | {step} |", flush=True)


if __name__ == "__main__":
    bp.run_main(main, "interrupted: valgrind stopped, database dropped")
