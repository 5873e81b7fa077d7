"""Where the time of one single enqueue goes: awa_bridge's calls beside their parts and pgqueuer's.

Every case runs N calls on asyncpg against one database (awa_bridge's schema
and pgqueuer's side by side), interleaved in chunks so that every case sees
the same machine; the table gives microseconds per call (median of the
chunks) and calls/s. The cases peel the path apart:

* ``SELECT 1``: one round trip, the floor of any call.
* bare ``INSERT ... RETURNING id`` into ``awa.jobs`` (args JSON-encoded here).
* ``awa.insert_job_compat(kind, queue, args)``: the contract function, 3 arguments,
  called in FROM (a function scan) and in a select list (as ``insert_job`` called it
  until 2026-12-04; it now sends a plain INSERT, docs/adr/004).
* the statement ``insert_job`` sends for this job (``PreparedJob.statement()``),
  with the parameters precomputed: the SQL side of ``insert_job``.
* ``prepare_job`` alone: validation, canonical JSON, no database.
* ``awa_bridge.insert_job`` on an autocommit connection, and inside
  ``conn.transaction()`` (BEGIN and COMMIT are two more round trips).
* pool acquire + release alone (asyncpg's pool resets a connection on release).
* ``Client.insert``: the pool of ``awa_bridge.worker.Client`` plus ``insert_job``.
* pgqueuer's ``Queries.enqueue(entrypoint, payload)``.

With ``--profile`` it also prints the top functions of ``insert_job`` and of
``Client.insert`` under cProfile. With ``--steps`` it prints instead what each
step of ``insert_job``'s own client path costs where it runs in real use:
timed one call at a time just after a round trip to the server (the caches
have gone cold while the client waited), beside the same step in a tight loop
of its own (warm), and beside the bare INSERT's own ``json.dumps``. ``synchronous_commit`` is off on the
throwaway database unless ``--durable``, so that the figures are the client's
and server's CPU, not the disk's flush.

    python benchmarks/profile_single_enqueue.py --database-url postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_procs as bp
import bench_worker as bw

Call = Callable[[int], Awaitable[Any]]
BARE_INSERT = "INSERT INTO awa.jobs (kind, queue, args) VALUES ($1, $2, $3::jsonb) RETURNING id"


async def cases(url: str) -> tuple[dict[str, Call], Callable[[], Awaitable[None]]]:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    import awa_bridge
    from awa_bridge.enqueue import prepare_job
    from awa_bridge.worker.client import Client

    conn = await asyncpg.connect(url)
    tx_conn = await asyncpg.connect(url)
    pool = await asyncpg.create_pool(url, min_size=1, max_size=4)
    client = Client(url)
    pgq_conn = await asyncpg.connect(url)
    pgq = Queries(AsyncpgDriver(pgq_conn))

    def args(i: int) -> dict[str, Any]:
        return {"to": "a@example.com", "subject": "Hi", "n": i}

    prepared = prepare_job(args(0), kind="send_email", queue="bench")
    stmt, params = prepared.statement()
    ordered = stmt.positional(params)

    async def select_1(i: int) -> Any:
        return await conn.fetchval("SELECT 1")

    async def bare(i: int) -> Any:
        return await conn.fetchval(
            BARE_INSERT,
            "send_email",
            "bench",
            json.dumps(args(i)),
        )

    async def compat_from(i: int) -> Any:
        return await conn.fetchrow(
            "SELECT id, run_at, created_at FROM awa.insert_job_compat($1, $2, $3::jsonb)",
            "send_email",
            "bench",
            json.dumps(args(i)),
        )

    async def compat_select(i: int) -> Any:
        return await conn.fetchrow(
            "SELECT (j).id, (j).run_at, (j).created_at"
            " FROM (SELECT awa.insert_job_compat($1, $2, $3::jsonb) AS j OFFSET 0) AS inserted",
            "send_email",
            "bench",
            json.dumps(args(i)),
        )

    async def statement(i: int) -> Any:
        return await conn.fetchrow(stmt.numeric, *ordered)

    async def prepare(i: int) -> Any:
        return prepare_job(args(i), kind="send_email", queue="bench")

    async def insert_job(i: int) -> Any:
        return await awa_bridge.insert_job(conn, args(i), kind="send_email", queue="bench")

    async def insert_job_tx(i: int) -> Any:
        async with tx_conn.transaction():
            return await awa_bridge.insert_job(tx_conn, args(i), kind="send_email", queue="bench")

    async def acquire_release(i: int) -> Any:
        async with pool.acquire():
            return None

    async def client_insert(i: int) -> Any:
        return await client.insert(args(i), kind="send_email", queue="bench")

    async def pgqueuer(i: int) -> Any:
        return await pgq.enqueue("send_email", json.dumps(args(i)).encode())

    async def close() -> None:
        await client.shutdown()
        await pool.close()
        for c in (conn, tx_conn, pgq_conn):
            await c.close()

    out: dict[str, Call] = {
        "SELECT 1 (one round trip)": select_1,
        "bare INSERT ... RETURNING id": bare,
        "awa.insert_job_compat, 3 args, in FROM": compat_from,
        "awa.insert_job_compat, 3 args, in the select list": compat_select,
        "insert_job's statement, params precomputed": statement,
        "prepare_job only (no database)": prepare,
        "awa_bridge.insert_job, autocommit": insert_job,
        "awa_bridge.insert_job in conn.transaction()": insert_job_tx,
        "pool acquire + release only": acquire_release,
        "Client.insert": client_insert,
        "pgqueuer Queries.enqueue": pgqueuer,
    }
    return out, close


async def measure(calls: dict[str, Call], n: int, chunk: int) -> dict[str, list[float]]:
    per_call: dict[str, list[float]] = {name: [] for name in calls}
    for call in calls.values():  # warm-up: connections, prepared statements, plans
        for i in range(50):
            await call(i)
    order = list(calls)
    for r in range(max(1, n // chunk)):
        for name in order if r % 2 == 0 else reversed(order):
            call = calls[name]
            began = time.perf_counter()
            for i in range(chunk):
                await call(i)
            per_call[name].append((time.perf_counter() - began) / chunk)
    return per_call


@dataclass
class SendEmail:
    """The args of the steps table (the benchmarks' job: ``bench_enqueue.SendEmail``)."""

    to: str
    subject: str
    n: int


STEP_NAMES = (
    "the bare INSERT's own json.dumps of the args dict",
    "insert_job's short path for plain args: plain_insert (parameters and the Job's fields)",
    "the full path: prepare_job, statement() and its asyncpg parameters",
    "the round trip of insert_job's statement",
    "short path: inserted_plain, the returned Job",
    "full path: PreparedJob.inserted, the returned Job",
)


async def steps(url: str, n: int) -> dict[str, tuple[float, float]]:
    """Each step of ``insert_job``'s client path: (cold, warm) median nanoseconds.

    Cold: each round sends a bare INSERT and then ``insert_job``'s statement,
    timing every step of its own on the way, one call each; the short path
    (``plain_insert``, ``inserted_plain``: what ``insert_job`` does with plain
    args and no option) and the full one (``prepare_job``, ``statement()``,
    ``PreparedJob.inserted``: any other call) alternate from round to round.
    Warm: each step repeated back to back in a loop of its own.
    """
    import asyncpg

    from awa_bridge.enqueue import _INSERT_PLAIN, inserted_plain, plain_insert, prepare_job

    clock = time.perf_counter_ns
    conn = await asyncpg.connect(url)
    try:
        cold: dict[str, list[int]] = {name: [] for name in STEP_NAMES}
        dumps_, short, full, round_trip, short_job, full_job = STEP_NAMES
        warm_up = min(200, n // 4)
        for i in range(n + warm_up):
            data = {"to": f"user{i}@example.com", "subject": "Welcome aboard", "n": i}
            began = clock()
            text = json.dumps(data)
            took = {dumps_: clock() - began}
            await conn.fetchval(BARE_INSERT, "send_email", "default", text)
            args = SendEmail(**data)
            if i % 2:
                began = clock()
                planned = plain_insert(args, {})
                assert planned is not None
                query, (params, job) = _INSERT_PLAIN, planned
                ordered = query.positional(params)
                took[short] = clock() - began
            else:
                began = clock()
                prepared = prepare_job(args)
                query, params = prepared.statement()
                ordered = query.positional(params)
                took[full] = clock() - began
            began = clock()
            row = await conn.fetchrow(query.numeric, *ordered)
            took[round_trip] = clock() - began
            began = clock()
            if i % 2:
                inserted_plain(job, row)
                took[short_job] = clock() - began
            else:
                prepared.inserted(row)
                took[full_job] = clock() - began
            if i >= warm_up:
                for name, value in took.items():
                    cold[name].append(value)
        args = SendEmail("user@example.com", "Welcome aboard", 1)
        data = vars(args)
        prepared = prepare_job(args)
        query, params = prepared.statement()
        row = await conn.fetchrow(query.numeric, *query.positional(params))
        planned = plain_insert(args, {})
        assert planned is not None
        job = planned[1]

        def short_path() -> Any:
            planned = plain_insert(args, {})
            assert planned is not None
            return _INSERT_PLAIN.positional(planned[0])

        loops: dict[str, Callable[[], Any]] = {
            dumps_: lambda: json.dumps(data),
            short: short_path,
            full: lambda: query.positional(prepare_job(args).statement()[1]),
            short_job: lambda: inserted_plain(job, row),  # the same dict again: its fields rewritten
            full_job: lambda: prepared.inserted(row),
        }
        warm = {name: _tight_loop(loop, 2000) for name, loop in loops.items()}
        await conn.execute("DELETE FROM awa.jobs")
    finally:
        await conn.close()
    return {name: (statistics.median(cold[name]), warm.get(name, float("nan"))) for name in STEP_NAMES}


def _tight_loop(step: Callable[[], Any], n: int) -> float:
    """Median nanoseconds of ``step`` in chunks of 100 calls back to back."""
    clock = time.perf_counter_ns
    chunks = []
    for _ in range(max(1, n // 100)):
        began = clock()
        for _ in range(100):
            step()
        chunks.append((clock() - began) / 100)
    return statistics.median(chunks)


def print_steps(per_step: dict[str, tuple[float, float]], n: int, durable: bool) -> None:
    print(f"# Single enqueue, insert_job's own steps between round trips ({n} rounds)")
    print()
    print(
        f"asyncpg; synchronous_commit {'as the server has it' if durable else 'off'}; "
        f"load average {bw._loadavg()}. Cold: one call just after a round trip, as in real use; "
        "warm: the same step in a tight loop of its own."
    )
    print()
    print("| step | cold, us | warm, us |")
    print("|---|---:|---:|")
    for name, (cold, warm) in per_step.items():
        warm_text = "-" if warm != warm else f"{warm / 1000:,.1f}"
        print(f"| {name} | {cold / 1000:,.1f} | {warm_text} |")


async def profile(call: Call, n: int, top: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(n):
        await call(i)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
    return text.getvalue()


async def run(args: argparse.Namespace, server_url: str) -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    import awa_bridge

    dbs = bw.Databases(server_url)
    try:
        name = dbs.template("enqueue_profile")
        url = dbs.url(name)
        await asyncio.to_thread(awa_bridge.migrate, url)
        conn = await asyncpg.connect(url)
        await Queries(AsyncpgDriver(conn)).install()
        if not args.durable:
            await conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
        await conn.close()
        if args.steps:
            print_steps(await steps(url, args.n), args.n, args.durable)
            return
        calls, close = await cases(url)
        try:
            per_call = await measure(calls, args.n, args.chunk)
            base = statistics.median(per_call["bare INSERT ... RETURNING id"])
            pgq = statistics.median(per_call["pgqueuer Queries.enqueue"])
            print(f"# Single enqueue, where the time goes ({args.n} calls per case, chunks of {args.chunk})")
            print()
            print(
                f"asyncpg; synchronous_commit {'as the server has it' if args.durable else 'off'}; "
                f"load average {bw._loadavg()}."
            )
            print()
            print("| case | us/call | calls/s | x bare INSERT | x pgqueuer |")
            print("|---|---:|---:|---:|---:|")
            for case, samples in per_call.items():
                us = statistics.median(samples) * 1e6
                print(f"| {case} | {us:,.0f} | {1e6 / us:,.0f} | {us / (base * 1e6):.2f} | {us / (pgq * 1e6):.2f} |")
            if args.profile:
                for case in ("awa_bridge.insert_job, autocommit", "Client.insert"):
                    print(f"\n## cProfile: {case}, {args.n} calls\n\n```")
                    stats = await profile(calls[case], args.n, args.top)
                    print(stats.strip())
                    print("```")
        finally:
            await close()
    finally:
        dbs.drop_all()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL"), help="server to use")
    parser.add_argument("-n", type=int, default=2000, help="calls per case (default 2000)")
    parser.add_argument("--chunk", type=int, default=100, help="calls per interleaved turn (default 100)")
    parser.add_argument("--durable", action="store_true", help="keep the server's synchronous_commit")
    parser.add_argument("--profile", action="store_true", help="also cProfile insert_job and Client.insert")
    parser.add_argument(
        "--steps", action="store_true", help="time each step of insert_job between round trips instead (n rounds)"
    )
    parser.add_argument("--top", type=int, default=25, help="functions per profile (default 25)")
    args = parser.parse_args(argv)
    if not args.database_url:
        parser.error("--database-url (or DATABASE_URL) is required")
    bp.require_positive(parser, args, "-n", "--chunk")
    bp.check_server(args.database_url)
    asyncio.run(run(args, args.database_url))


if __name__ == "__main__":
    bp.run_main(main, "interrupted: database dropped")
