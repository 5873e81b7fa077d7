"""Scale benchmark: does awa_bridge's drain stay fast as the table and the fleet grow?

Measurements on one PostgreSQL server, each printed as a table, the drains
beside the "SQL-only limit" on the same database: a loop of batched claims
(``UPDATE ... WHERE id = ANY(ARRAY(SELECT ... FOR UPDATE SKIP LOCKED))
RETURNING``, aggregated into one array, planned once as the worker plans its
statements, each scan continuing after the last job claimed) then completions
(``UPDATE ... WHERE id = ANY(...)``), with no Python per job, on
``--sql-connections`` connections at once. That is about as fast as this
machine can move jobs through ``awa.jobs``; our drain is shown as a fraction
of it.

* retained: drain ``--jobs`` (default 250,000) jobs with ``--retained``
  (default 10,000,000) finished jobs already in the table vs on an empty
  table, ``--rounds`` interleaved rounds, median. A drain lasts several
  seconds, so the worker's start-up and ramp (about a fifth of a second here)
  hardly weigh on it: the SQL-only loop's clock starts with its connections
  open and its statements prepared. The finished rows are made in the database
  (``INSERT ... SELECT generate_series``, 1,000,000 per statement), then
  ``VACUUM ANALYZE``. Target: retained / empty >= 0.9.
* backlog: drain a ``--backlog`` (default 1,000,000) job backlog vs a
  ``--small`` (50,000) one, with the rate per tenth of the big drain (does it
  slow down as it goes?), and the SQL-only loop on both backlogs: how much
  of any slowdown is the server's own. Target: big / small >= 1.0. Every enqueue is
  followed by ANALYZE unless ``--no-analyze``: then the drains start on the
  table as a bulk load leaves it before autovacuum's first ANALYZE.
* horizontal: ``--processes`` (default 1,2,4,8) worker processes on one
  database draining ``--scale-jobs`` jobs; throughput per process count, and a
  check that no job was claimed twice: every worker's handler writes the ids
  it ran to a ledger (read by the parent), and the database must show every
  job completed with ``attempt = 1`` and ``run_lease = 1``.
* cleanup: a worker started on ``--cleanup-rows`` (default 1,000,000)
  completed jobs already past their retention; how fast its maintenance
  deletes them, against the 1-process drain rate of this run. Target: >= 10x.

    python benchmarks/bench_scale.py --database-url postgresql://postgres@127.0.0.1:5432/postgres

Without ``--database-url`` it uses ``$DATABASE_URL``, else an embedded server.
Every database it creates (``awa_benchw_<pid>_...``) is dropped at the end,
also on Ctrl-C, SIGTERM or an error; every worker process is stopped. The retained
section needs disk: about 2 GB for 10 million rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_procs as bp
import bench_worker as bw

from awa_bridge.worker.config import DEFAULT_CLAIM_BATCH
from awa_bridge.worker.producer import FROM_THE_START

SECTIONS = ("retained", "backlog", "horizontal", "cleanup")
FILL_CHUNK = 1_000_000
COPY_CHUNK = 100_000

REMAINING_SQL = "SELECT count(*) FROM awa.jobs WHERE queue = $1 AND state IN ('available', 'running')"

# The SQL-only limit: the same claim shape as the worker's (SKIP LOCKED, new
# attempt and run_lease, heartbeat, deadline, the state re-checked as text so
# that a never-analyzed table's generic plan finds the ids by primary key; the
# scan continuing after the last job this connection claimed, as a worker's
# producer does while it drains a backlog; see claim_jobs), ids aggregated in
# the server so the client touches one array per batch, never a row. Started
# from the beginning at every claim instead, the loop walks the index entries of
# every job claimed since the last vacuum: it ran a million-job backlog at two
# thirds of its 50,000-job rate (2026-12-05), a handicap the worker does not have.


def claim_sql(table: str = "awa.jobs", waited: bool = False) -> str:
    """The SQL-only loop's claim on ``table``; with ``waited``, also each job's seconds since it was made
    (bench_storage.py's pickup latency), aggregated in the server as the ids are."""
    extra = ", date_part('epoch', now() - j.created_at) AS waited" if waited else ""
    agg = ", (SELECT array_agg(waited) FROM claimed) AS waited" if waited else ""
    return f"""
WITH candidates AS (
    SELECT id FROM {table}
    WHERE state = 'available' AND queue = $1
      AND (priority, run_at, id) > ($3::smallint, $4::timestamptz, $5::bigint)
    ORDER BY priority, run_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE {table} AS j
    SET state = 'running', attempt = j.attempt + 1, run_lease = j.run_lease + 1,
        attempted_at = now(), heartbeat_at = now(), deadline_at = now() + interval '5 minutes'
    WHERE j.id = ANY(ARRAY(SELECT id FROM candidates)) AND j.state::text = 'available'
    RETURNING j.id, j.priority, j.run_at{extra}
), last AS (
    SELECT priority, run_at, id FROM claimed ORDER BY priority DESC, run_at DESC, id DESC LIMIT 1
)
SELECT (SELECT array_agg(id) FROM claimed) AS ids{agg}, priority, run_at, id AS last_id FROM last
"""


SQL_CLAIM = claim_sql()
SQL_COMPLETE = """
UPDATE awa.jobs
SET state = 'completed', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL
WHERE id = ANY($1::bigint[])
"""

FILL_SQL = """
INSERT INTO awa.jobs (kind, queue, args, state, attempt, run_lease, run_at, attempted_at, finalized_at, created_at)
SELECT $3, $4, jsonb_build_object('i', g), 'completed', 1, 1,
       now() - interval '1 hour', now() - interval '1 hour',
       now() - make_interval(secs => $5 + g % 3600), now() - interval '1 hour'
FROM generate_series($1::bigint, $2::bigint) AS g
"""


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- filling tables -----------------------------------------------------------------------


async def enqueue(url: str, n: int, analyze: bool) -> None:
    """``n`` available no-op jobs, by COPY (``insert_many_sync``), then ANALYZE unless ``--no-analyze``."""
    import psycopg

    import awa_bridge

    def copy() -> None:
        with psycopg.connect(url) as conn:
            for start in range(0, n, COPY_CHUNK):
                jobs = [{"i": i} for i in range(start, min(n, start + COPY_CHUNK))]
                awa_bridge.insert_many_sync(conn, jobs, kind=bp.KIND, queue=bp.QUEUE)
            conn.commit()
            if analyze:
                conn.execute("ANALYZE awa.jobs")

    await asyncio.to_thread(copy)


async def fill_retained(url: str, n: int, age: float = 0.0) -> float:
    """``n`` completed jobs finalized ``age`` s to ``age`` + 1 h ago, made in the server, then VACUUM ANALYZE.

    Returns the seconds taken.
    """
    import asyncpg

    began = time.perf_counter()
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SET synchronous_commit = off")
        for start in range(1, n + 1, FILL_CHUNK):
            end = min(n, start + FILL_CHUNK - 1)
            await conn.execute(FILL_SQL, start, end, bp.KIND, bp.QUEUE, float(age))
            say(f"  finished jobs: {end:,} / {n:,} rows ({time.perf_counter() - began:.0f} s)")
        await conn.execute("VACUUM ANALYZE awa.jobs")
    finally:
        await conn.close()
    return time.perf_counter() - began


async def reset_to(url: str, keep_through: int) -> None:
    """Delete the jobs after id ``keep_through`` (a round's), then VACUUM ANALYZE."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DELETE FROM awa.jobs WHERE id > $1", keep_through)
        await conn.execute("VACUUM ANALYZE awa.jobs")
    finally:
        await conn.close()


async def max_id(url: str) -> int:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT coalesce(max(id), 0) FROM awa.jobs"))
    finally:
        await conn.close()


async def table_mb(url: str) -> float:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return float(await conn.fetchval("SELECT pg_total_relation_size('awa.jobs')")) / 2**20
    finally:
        await conn.close()


# -- measurements ---------------------------------------------------------------------------


@dataclass
class DrainRun:
    n: int
    seconds: float
    rate: float
    handled: list[int] = field(default_factory=list)  # per process
    progress: list[tuple[float, int]] = field(default_factory=list)  # (seconds, remaining)
    duplicates: int = 0  # ids handled more than once, across processes
    distinct: int = 0
    repeated_attempts: int = 0  # jobs with attempt > 1 or run_lease > 1
    not_completed: int = 0
    timed_out: bool = False

    @property
    def warm_rate(self) -> float:
        """Jobs/s from the parent's first sight of a finished job to the end: worker start-up left out."""
        first = next(((t, rem) for t, rem in self.progress if rem < self.n), None)
        end_t, end_rem = self.progress[-1] if self.progress else (0.0, self.n)
        if first is None or end_t <= first[0]:
            return self.rate
        return (first[1] - end_rem) / (end_t - first[0])


async def drain(
    url: str,
    n: int,
    *,
    processes: int,
    concurrency: int,
    timeout: float,
    bridge_config: dict[str, Any],
    ledger: bool = False,
) -> DrainRun:
    """Start ``processes`` workers on a queue of ``n`` jobs; time until the last one is finished."""
    import asyncpg

    conn = await asyncpg.connect(url)
    workers = [
        bp.Worker("awa_bridge", url, concurrency, bridge_config=bridge_config, ledger=ledger) for _ in range(processes)
    ]
    try:
        remaining = int(await conn.fetchval(REMAINING_SQL, bp.QUEUE))
        if remaining != n:
            raise RuntimeError(f"expected {n} queued jobs, found {remaining}")
        first_id = int(
            await conn.fetchval("SELECT min(id) FROM awa.jobs WHERE queue = $1 AND state = 'available'", bp.QUEUE)
        )
        await asyncio.gather(*(w.spawn() for w in workers))
        # Whether any job is left, every 20 ms (a probe that stops at the first row); how many, for
        # the progress, only every 10th poll (every 25th on a big backlog): counting them all at
        # every poll took a share of the server away from the drain being measured.
        probe = bw.any_left(REMAINING_SQL)
        every = 10 if n <= 100_000 else 25
        began = time.perf_counter()
        for w in workers:
            await w.send("GO")
        progress: list[tuple[float, int]] = []
        deadline = began + timeout
        polls = 0
        while True:
            counted = polls % every == 0
            if counted or not int(await conn.fetchval(probe, bp.QUEUE)):
                remaining = int(await conn.fetchval(REMAINING_SQL, bp.QUEUE))
                counted = True
            now = time.perf_counter()
            if counted:
                progress.append((now - began, remaining))
            if remaining == 0 or now > deadline:
                break
            polls += 1
            await asyncio.sleep(0.02)
        elapsed = now - began
        handled = [await w.stop() for w in workers]
        run = DrainRun(n, elapsed, (n - remaining) / elapsed, handled, progress, timed_out=remaining > 0)
        if ledger:
            seen: set[int] = set()
            total = 0
            for w in workers:
                ids = w.ids()
                total += len(ids)
                seen.update(ids)
            run.distinct = len(seen)
            run.duplicates = total - len(seen)
        row = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE attempt > 1 OR run_lease > 1) AS repeated,"
            " count(*) FILTER (WHERE state <> 'completed') AS open"
            " FROM awa.jobs WHERE queue = $1 AND id >= $2",
            bp.QUEUE,
            first_id,
        )
        assert row is not None
        run.repeated_attempts, run.not_completed = int(row["repeated"]), int(row["open"])
        return run
    finally:
        for w in workers:
            await w.kill()
            w.cleanup()
        await conn.close()


async def sql_limit(url: str, n: int, connections: int, batch: int) -> float:
    """Jobs/s of the SQL-only claim + complete loop over ``n`` queued jobs."""
    import asyncpg

    from awa_bridge.drivers.connect import OWN_STATEMENT_SETTINGS

    # Planned as the worker's own pool plans its statements (generic plans, a sort only where there is
    # no other way, as in this loop's `last`, and no JIT).
    conns = [await asyncpg.connect(url, server_settings=OWN_STATEMENT_SETTINGS) for _ in range(connections)]
    try:
        remaining = int(await conns[0].fetchval(REMAINING_SQL, bp.QUEUE))
        if remaining != n:
            raise RuntimeError(f"expected {n} queued jobs, found {remaining}")
        claims = [await c.prepare(SQL_CLAIM) for c in conns]
        completes = [await c.prepare(SQL_COMPLETE) for c in conns]

        async def loop(k: int) -> None:
            after = FROM_THE_START
            while True:
                row = await claims[k].fetchrow(bp.QUEUE, batch, *after)
                if row is None:
                    if after is FROM_THE_START:
                        return
                    after = FROM_THE_START  # past the last job: look once more from the start
                    continue
                await completes[k].fetch(row["ids"])
                after = (row["priority"], row["run_at"], row["last_id"])

        began = time.perf_counter()
        await asyncio.gather(*(loop(k) for k in range(connections)))
        elapsed = time.perf_counter() - began
        left = int(await conns[0].fetchval(REMAINING_SQL, bp.QUEUE))
        if left:
            raise RuntimeError(f"SQL-only loop left {left} jobs")
        return n / elapsed
    finally:
        for c in conns:
            await c.close()


WARM_NOTE = (
    "Drain: from telling the spawned worker process (imports done) to start its worker until every job is "
    "finished, as bench_worker.py clocks it, so the worker's start-up is included. Warm: from the parent's "
    "first sight of a finished job to the end, start-up left out; it matters most for short drains."
)


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def segment_rates(run: DrainRun, parts: int = 10) -> list[float]:
    """Jobs/s over each tenth of a drain, from the parent's (seconds, remaining) samples."""
    rates: list[float] = []
    t_prev, done_prev = 0.0, 0
    for k in range(1, parts + 1):
        goal = run.n * k // parts
        hit = next(((t, run.n - rem) for t, rem in run.progress if run.n - rem >= goal), None)
        if hit is None:
            break
        t, done = hit
        if t > t_prev:
            rates.append((done - done_prev) / (t - t_prev))
            t_prev, done_prev = t, done
    return rates


# -- the sections --------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, dbs: bw.Databases, template: str) -> None:
        self.args = args
        self.dbs = dbs
        self.template = template
        self.config: dict[str, Any] = json.loads(args.bridge_config or "{}")
        self.drain_rate: float | None = None  # a 1-process drain rate measured in this run, for the cleanup ratio

    def fresh(self) -> str:
        return self.dbs.copy(self.template)

    async def drain(self, url: str, n: int, processes: int = 1, ledger: bool = False) -> DrainRun:
        return await drain(
            url,
            n,
            processes=processes,
            concurrency=self.args.concurrency,
            timeout=self.args.drain_timeout,
            bridge_config=self.config,
            ledger=ledger,
        )

    async def retained(self, out: list[str]) -> None:
        a = self.args
        empty, full = self.fresh(), self.fresh()
        try:
            say(f"retained: making {a.retained:,} finished jobs")
            fill_s = await fill_retained(self.dbs.url(full), a.retained)
            size = await table_mb(self.dbs.url(full))
            base = {empty: await max_id(self.dbs.url(empty)), full: await max_id(self.dbs.url(full))}
            rates: dict[str, list[float]] = {empty: [], full: []}
            warm: dict[str, list[float]] = {empty: [], full: []}
            limits: dict[str, list[float]] = {empty: [], full: []}
            for r in range(a.rounds):
                order = [empty, full] if r % 2 == 0 else [full, empty]
                for db in order:
                    url = self.dbs.url(db)
                    label = "empty" if db == empty else "retained"
                    await enqueue(url, a.jobs, a.analyze)
                    run = await self.drain(url, a.jobs)
                    rates[db].append(run.rate)
                    warm[db].append(run.warm_rate)
                    await reset_to(url, base[db])
                    await enqueue(url, a.jobs, a.analyze)
                    limit = await sql_limit(url, a.jobs, a.sql_connections, a.sql_batch)
                    limits[db].append(limit)
                    await reset_to(url, base[db])
                    say(
                        f"  round {r + 1} {label:<8} drain {run.rate:,.0f}/s, SQL-only {limit:,.0f}/s"
                        f"{' TIMEOUT' if run.timed_out else ''}"
                    )
        finally:
            self.dbs.drop(empty)
            self.dbs.drop(full)
        e, f = median(rates[empty]), median(rates[full])
        self.drain_rate = self.drain_rate or e
        we, wf = median(warm[empty]), median(warm[full])
        le, lf = median(limits[empty]), median(limits[full])
        # Each round's drain over the limit measured right after it: steadier than a ratio of
        # medians when the host's speed drifts across the run.
        pe, pf = (median([r / x for r, x in zip(rates[db], limits[db], strict=True) if x]) for db in (empty, full))
        out += [
            f"## Drain with {a.retained:,} retained finished jobs vs an empty table",
            "",
            f"{a.jobs:,} jobs per drain, 1 worker process, concurrency {a.concurrency}; median of {a.rounds} "
            f"interleaved rounds. Retained table: {size:,.0f} MB (awa.jobs with its indexes), made in "
            f"{fill_s:.0f} s.",
            "",
            "| table | drain jobs/s | warm jobs/s | SQL-only limit jobs/s | drain / limit (warm / limit) "
            "| drain / limit, median of rounds |",
            "|---|---:|---:|---:|---:|---:|",
            f"| empty | {e:,.0f} | {we:,.0f} | {le:,.0f} | {ratio(e, le)} ({ratio(we, le)}) | {pe:.2f} |",
            f"| {a.retained:,} retained | {f:,.0f} | {wf:,.0f} | {lf:,.0f} | {ratio(f, lf)} ({ratio(wf, lf)}) "
            f"| {pf:.2f} |",
            "",
            f"Retained / empty: **{ratio(f, e)}x** (target >= 0.90x); warm: {ratio(wf, we)}x",
            "",
            WARM_NOTE,
            "",
        ]

    async def backlog(self, out: list[str]) -> None:
        a = self.args
        small_rates: list[float] = []
        small_warm: list[float] = []
        small_limits: list[float] = []
        db = self.fresh()
        try:
            url = self.dbs.url(db)
            base = await max_id(url)
            for r in range(a.rounds):
                await enqueue(url, a.small, a.analyze)
                run = await self.drain(url, a.small)
                small_rates.append(run.rate)
                small_warm.append(run.warm_rate)
                await reset_to(url, base)
                await enqueue(url, a.small, a.analyze)
                small_limits.append(await sql_limit(url, a.small, a.sql_connections, a.sql_batch))
                await reset_to(url, base)
                say(f"  backlog small round {r + 1}: drain {run.rate:,.0f}/s, SQL-only {small_limits[-1]:,.0f}/s")
        finally:
            self.dbs.drop(db)
        db = self.fresh()
        try:
            url = self.dbs.url(db)
            say(f"backlog: enqueueing {a.backlog:,} jobs")
            base = await max_id(url)
            await enqueue(url, a.backlog, a.analyze)
            big = await self.drain(url, a.backlog)
            say(f"  backlog big: {big.rate:,.0f}/s in {big.seconds:.1f} s{' TIMEOUT' if big.timed_out else ''}")
            # The same backlog through the SQL-only loop: how much of a slower big drain is the
            # server's own (a table past shared_buffers, its dead rows) rather than the worker's.
            await reset_to(url, base)
            await enqueue(url, a.backlog, a.analyze)
            big_limit = await sql_limit(url, a.backlog, a.sql_connections, a.sql_batch)
            say(f"  backlog big: SQL-only {big_limit:,.0f}/s")
        finally:
            self.dbs.drop(db)
        s, ws, lim = median(small_rates), median(small_warm), median(small_limits)
        self.drain_rate = self.drain_rate or s
        segments = segment_rates(big)
        out += [
            f"## Backlog: {a.backlog:,} queued jobs vs {a.small:,}",
            "",
            f"1 worker process, concurrency {a.concurrency}; the small drain is the median of {a.rounds} rounds.",
            "",
            "| backlog | drain jobs/s | warm jobs/s | seconds | SQL-only limit jobs/s |",
            "|---|---:|---:|---:|---:|",
            f"| {a.small:,} | {s:,.0f} | {ws:,.0f} | {a.small / s if s else 0:.2f} | {lim:,.0f} |",
            f"| {a.backlog:,} | {big.rate:,.0f}{' (timeout)' if big.timed_out else ''} | {big.warm_rate:,.0f} "
            f"| {big.seconds:.1f} | {big_limit:,.0f} |",
            "",
            f"Big / small: **{ratio(big.rate, s)}x** (target >= 1.00x); warm: {ratio(big.warm_rate, ws)}x; "
            f"the SQL-only loop's own big / small: {ratio(big_limit, lim)}x. Drain / limit: small "
            f"{ratio(s, lim)} (warm {ratio(ws, lim)}), big {ratio(big.rate, big_limit)} "
            f"(warm {ratio(big.warm_rate, big_limit)})",
            "",
            WARM_NOTE,
            "",
            "Rate per tenth of the big drain (jobs/s): " + ", ".join(f"{x:,.0f}" for x in segments),
            "",
        ]

    async def horizontal(self, out: list[str]) -> None:
        a = self.args
        rows: list[tuple[int, DrainRun, float]] = []
        for p in a.processes:
            db = self.fresh()
            try:
                url = self.dbs.url(db)
                await enqueue(url, a.scale_jobs, a.analyze)
                run = await self.drain(url, a.scale_jobs, processes=p, ledger=True)
                await reset_to(url, 0)
                await enqueue(url, a.scale_jobs, a.analyze)
                limit = await sql_limit(url, a.scale_jobs, p, a.sql_batch)
                rows.append((p, run, limit))
                say(
                    f"  horizontal {p} process(es): {run.rate:,.0f}/s, per process {run.handled}, "
                    f"handled twice {run.duplicates}, attempts > 1: {run.repeated_attempts}; "
                    f"SQL-only on {p} connection(s) {limit:,.0f}/s"
                )
            finally:
                self.dbs.drop(db)
        one = rows[0][1].rate if rows else 0.0
        out += [
            f"## Horizontal: worker processes on one database, {a.scale_jobs:,} jobs",
            "",
            f"Each process has concurrency {a.concurrency}. 'handled twice' counts ids that more than one handler "
            "call saw (from every process's ledger); 'attempt > 1' counts jobs the database shows claimed more "
            "than once (attempt or run_lease above 1).",
            "",
            "| processes | jobs/s | x 1 process | jobs per process | handled twice | attempt > 1 | not completed "
            "| SQL-only limit, same number of connections |",
            "|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for p, run, limit in rows:
            out.append(
                f"| {p} | {run.rate:,.0f}{' (timeout)' if run.timed_out else ''} | {run.rate / one:.2f} "
                f"| {', '.join(f'{h:,}' for h in run.handled)} | {run.duplicates} | {run.repeated_attempts} "
                f"| {run.not_completed} | {limit:,.0f} |"
            )
        clean = all(
            run.duplicates == 0
            and run.repeated_attempts == 0
            and run.not_completed == 0
            and run.distinct == a.scale_jobs
            and not run.timed_out
            for _, run, _ in rows
        )
        out += ["", f"Claims never duplicated, every job completed once: **{'yes' if clean else 'NO'}**", ""]

    async def cleanup(self, out: list[str]) -> None:
        """How fast the worker's retention cleanup deletes finished jobs already past their retention."""
        from awa_bridge.worker.config import WorkerConfig

        a = self.args
        retention = WorkerConfig(**self.config).completed_retention
        if self.drain_rate is None:
            db = self.fresh()
            try:
                url = self.dbs.url(db)
                await enqueue(url, a.jobs, a.analyze)
                self.drain_rate = (await self.drain(url, a.jobs)).rate
            finally:
                self.dbs.drop(db)
        db = self.fresh()
        worker = bp.Worker("awa_bridge", self.dbs.url(db), 10, bridge_config=self.config)
        try:
            url = self.dbs.url(db)
            say(f"cleanup: making {a.cleanup_rows:,} finished jobs past their retention ({retention:g} s)")
            await fill_retained(url, a.cleanup_rows, age=retention + 60)
            await worker.spawn()
            conn = await asyncpg_connect(url)
            try:
                count = "SELECT count(*) FROM awa.jobs WHERE state = 'completed'"
                poll = 0.1 if a.cleanup_rows <= 100_000 else 0.5
                began = time.perf_counter()
                await worker.send("GO")
                progress: list[tuple[float, int]] = []
                while True:
                    left = int(await conn.fetchval(count))
                    now = time.perf_counter() - began
                    progress.append((now, left))
                    if left == 0 or now > a.cleanup_timeout:
                        break
                    await asyncio.sleep(poll)
            finally:
                await conn.close()
            await worker.stop()
        finally:
            await worker.kill()
            worker.cleanup()
            self.dbs.drop(db)
        seconds, left = progress[-1]
        deleted = a.cleanup_rows - left
        first = next((t for t, rem in progress if rem < a.cleanup_rows), None)
        rate = deleted / seconds if seconds else 0.0
        warm = deleted / (seconds - first) if first is not None and seconds > first else rate
        drain = self.drain_rate or 0.0
        out += [
            f"## Retention cleanup: {a.cleanup_rows:,} finished jobs past their retention",
            "",
            f"One worker process (concurrency 10, no jobs to run; WorkerConfig overrides "
            f"{json.dumps(self.config) if self.config else 'none'}) started on a table of completed jobs "
            f"finalized more than completed_retention ({retention:g} s) ago; the parent counts the completed "
            f"rows every {poll * 1000:.0f} ms until none is left or {a.cleanup_timeout:g} s have passed.",
            "",
            "| rows | deleted | seconds | first deletion seen at s | deleted/s | after the first deletion /s "
            "| 1-process drain jobs/s (this run) | cleanup / drain |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {a.cleanup_rows:,} | {deleted:,}{'' if left == 0 else ' (timeout)'} | {seconds:.1f} "
            f"| {'-' if first is None else f'{first:.1f}'} | {rate:,.0f} | {warm:,.0f} | {drain:,.0f} "
            f"| **{ratio(warm, drain)}x** |",
            "",
            "Target (issue 11 point 1): cleanup at least 10x the drain rate, so retention keeps up with any rate "
            "the worker reaches.",
            "",
        ]


async def asyncpg_connect(url: str) -> Any:
    import asyncpg

    return await asyncpg.connect(url)


async def run(args: argparse.Namespace, server_url: str) -> list[str]:
    import awa_bridge

    dbs = bw.Databases(server_url)
    out: list[str] = []
    try:
        template = dbs.template("awa_bridge")
        await asyncio.to_thread(awa_bridge.migrate, dbs.url(template))
        bench = Bench(args, dbs, template)
        for section in args.only:
            try:
                await getattr(bench, section)(out)
            except Exception as exc:
                say(f"{section}: FAILED: {type(exc).__name__}: {exc}")
                out += [f"## {section}: FAILED", "", f"{type(exc).__name__}: {exc}", ""]
    finally:
        dbs.drop_all()
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    def counts(text: str) -> list[int]:
        return [int(x) for x in text.split(",")]

    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], epilog="See benchmarks/README.md for what each figure means."
    )
    parser.add_argument(
        "--database-url", default=os.environ.get("DATABASE_URL"), help="server to use (a database on it)"
    )
    parser.add_argument(
        "--only",
        type=lambda s: s.split(","),
        default=list(SECTIONS),
        help=f"comma-separated sections to run: {','.join(SECTIONS)} (default all)",
    )
    parser.add_argument("--retained", type=int, default=10_000_000, help="finished jobs in the table (10,000,000)")
    parser.add_argument("--jobs", type=int, default=250_000, help="jobs per retained/empty drain (default 250,000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the short drains (default 5)")
    parser.add_argument("--backlog", type=int, default=1_000_000, help="the big backlog (default 1,000,000)")
    parser.add_argument("--small", type=int, default=50_000, help="the small backlog it is compared with (50,000)")
    parser.add_argument(
        "--processes", type=counts, default=[1, 2, 4, 8], help="worker process counts (default 1,2,4,8)"
    )
    parser.add_argument("--scale-jobs", type=int, default=50_000, help="jobs per horizontal drain (default 50,000)")
    parser.add_argument("--concurrency", type=int, default=500, help="handlers per worker process (default 500)")
    parser.add_argument("--sql-connections", type=int, default=2, help="SQL-only loop connections (default 2)")
    parser.add_argument(
        "--sql-batch",
        type=int,
        default=DEFAULT_CLAIM_BATCH,
        help=f"SQL-only loop claim batch (default {DEFAULT_CLAIM_BATCH}, the worker's claim_batch)",
    )
    parser.add_argument(
        "--cleanup-rows", type=int, default=1_000_000, help="finished jobs past retention to clean up (1,000,000)"
    )
    parser.add_argument(
        "--cleanup-timeout", type=float, default=120.0, help="seconds the cleanup section waits at most (120)"
    )
    parser.add_argument(
        "--no-analyze",
        dest="analyze",
        action="store_false",
        help="start each drain on the jobs as the bulk enqueue left them, without the ANALYZE after it"
        " (a table before autovacuum's first ANALYZE, or on a server with autovacuum off)",
    )
    parser.add_argument("--drain-timeout", type=float, default=600.0, help="seconds before a drain gives up (600)")
    parser.add_argument("--bridge-config", metavar="JSON", help="WorkerConfig overrides for awa_bridge's worker")
    args = parser.parse_args(argv)
    for name in args.only:
        if name not in SECTIONS:
            parser.error(f"--only: unknown section {name!r} (choose from {', '.join(SECTIONS)})")
    for name in ("retained", "jobs", "rounds", "backlog", "small", "scale_jobs", "concurrency", "cleanup_rows"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.sql_connections < 1 or args.sql_batch < 1 or any(p < 1 for p in args.processes):
        parser.error("--sql-connections, --sql-batch and --processes must be >= 1")
    if args.bridge_config:
        from awa_bridge.worker.config import WorkerConfig

        try:
            WorkerConfig(**json.loads(args.bridge_config))
        except Exception as exc:
            parser.error(f"--bridge-config: {exc}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    url, server, where = bp.server(args.database_url)
    began = time.perf_counter()
    out = asyncio.run(run(args, url))  # Ctrl-C and SIGTERM: see bp.run_main
    analyzed = "ANALYZEd after each enqueue" if args.analyze else "never ANALYZEd (--no-analyze)"
    header = [
        f"# Scale benchmark ({where})",
        "",
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs; awa_bridge {bw._version('awa-bridge')}; "
        f"no-op handlers; event loop {bp.loop_names(['awa_bridge'], json.loads(args.bridge_config or '{}'))}. "
        f"SQL-only limit: {args.sql_connections} connection(s) (horizontal: one per process), "
        f"claim batch {args.sql_batch}. Queued jobs {analyzed}. "
        f"Load average at start {bw.LOAD_AT_START}, at end {bw._loadavg()}.",
        "",
    ]
    print("\n".join(header + out))
    say(f"(total {time.perf_counter() - began:.0f} s)")
    del server  # an embedded server stops with the process
    return 1 if any(line.endswith(": FAILED") for line in out) else 0


if __name__ == "__main__":
    bp.run_main(main)
