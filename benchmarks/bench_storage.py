"""Storage benchmark: would live jobs in a table of their own move jobs faster or steadier? SQL only.

The README names one change not made: keeping live jobs in a small table,
apart from the finished ones, with `awa.jobs` as the readers' face (DESIGN.md
section 9b allows it). This script measures what that would buy before
anyone builds it, with the SQL-only claim + complete loop of bench_scale.py
(no worker, no Python per job) on two layouts of the same jobs, each in a
throwaway database migrated by awa_bridge:

* one table: `awa.jobs` as it is. A claim and a completion each update a
  job's row; retention deletes it with the leader's own batch
  (`delete_finished`, `Cleanup.batch` rows, on a connection with the
  leader's settings), repeated until a batch comes back short, every
  `--cleanup-interval` seconds (the worker's default 10).
* split: live jobs in `awa.jobs_live` (`awa.jobs`'s columns, defaults,
  checks and indexes, and its insert trigger); the completion moves a job
  (one statement: `DELETE ... RETURNING` into `INSERT`) into
  `awa.jobs_done`, partitioned by `finalized_at` in `--partition-seconds`
  ranges, with every index of `awa.jobs` (unique ones as plain indexes: a
  unique index of a partitioned table must hold the partition key).
  Retention detaches (`CONCURRENTLY`) and drops the partitions wholly past
  it, on the same interval. A prototype of the layout, not what awa_bridge
  runs: nothing else of the schema (views, functions, the worker) knows it.

Two measurements per layout:

* drain: `--drain-jobs` queued jobs (inserted by `INSERT ... SELECT`, then
  ANALYZE) moved by the loop on `--connections` connections, `--rounds`
  interleaved rounds, median; each round starts on an emptied, vacuumed table.
* sustained: a producer inserting `--rate` jobs/s (one INSERT per 20 ms)
  while the loop claims (waiting 10 ms when it finds nothing) for
  `--minutes`, with a `--retention` of finished jobs: one line per
  `--report-seconds`, as bench_soak.py prints them (pickup is the claim's
  `now()` minus the job's `created_at`), and bench_soak.py's verdict.

    python benchmarks/bench_storage.py --database-url postgresql://postgres@127.0.0.1:5432/postgres

Run it on a server with autovacuum on (the sustained part turns rows over and
measures how each layout lives with its vacuum). Every database it creates
(`awa_benchw_<pid>_...`) is dropped at the end, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_procs as bp
import bench_scale
import bench_soak as bs
import bench_worker as bw

from awa_bridge.drivers.connect import LEADER_SETTINGS, OWN_STATEMENT_SETTINGS
from awa_bridge.worker.config import DEFAULT_CLAIM_BATCH, DEFAULT_CLEANUP_INTERVAL_SECONDS
from awa_bridge.worker.maintenance.cleanup import delete_finished
from awa_bridge.worker.maintenance.services import Cleanup
from awa_bridge.worker.producer import FROM_THE_START

ONE_TABLE = "one table"
SPLIT = "split"
LAYOUTS = (ONE_TABLE, SPLIT)
LIVE = {ONE_TABLE: "awa.jobs", SPLIT: "awa.jobs_live"}
IDLE_SECONDS = 0.01  # the loop's wait after a claim that found nothing

# The claim is bench_scale.py's (``claim_sql``: the worker's shape, the scan continuing after the last
# job claimed while claims come back full), on either layout's live table, also returning how long
# each job waited.
COMPLETE_ONE_TABLE = """
UPDATE awa.jobs
SET state = 'completed', finalized_at = now(), heartbeat_at = NULL, deadline_at = NULL
WHERE id = ANY($1::bigint[]) AND state::text = 'running'
"""

# The split's completion: the same new values, the row moved. {columns} and {values} are awa.jobs's
# columns in order, the values with the four the completion sets replaced.
COMPLETE_SPLIT = """
WITH moved AS (
    DELETE FROM awa.jobs_live WHERE id = ANY($1::bigint[]) AND state::text = 'running' RETURNING *
)
INSERT INTO awa.jobs_done ({columns}) SELECT {values} FROM moved
"""
COMPLETED_VALUES = {
    "state": "'completed'::awa.job_state",
    "finalized_at": "now()",
    "heartbeat_at": "NULL::timestamptz",
    "deadline_at": "NULL::timestamptz",
}

ENQUEUE_SQL = "INSERT INTO {live} (kind, queue, args) SELECT $1, $2, '{{}}'::jsonb FROM generate_series(1, $3)"
LEFT_SQL = "SELECT count(*) FROM {live} WHERE state IN ('available', 'running')"
ROWS_SQL = {
    ONE_TABLE: "SELECT count(*) FILTER (WHERE state NOT IN ('completed', 'failed', 'cancelled')),"
    " count(*) FILTER (WHERE state IN ('completed', 'failed', 'cancelled')) FROM awa.jobs",
    SPLIT: "SELECT (SELECT count(*) FROM awa.jobs_live), (SELECT count(*) FROM awa.jobs_done)",
}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- the split layout --------------------------------------------------------------------------


async def make_split(conn: Any, partition_seconds: int) -> Partitions:
    """``awa.jobs_live`` and ``awa.jobs_done`` beside ``awa.jobs`` (left empty), and the first partitions."""
    await conn.execute(
        """
        CREATE TABLE awa.jobs_live (LIKE awa.jobs INCLUDING ALL);
        CREATE TRIGGER jobs_live_notify_inserted AFTER INSERT ON awa.jobs_live
            REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION awa.notify_jobs_inserted();
        CREATE TABLE awa.jobs_done (LIKE awa.jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
            PARTITION BY RANGE (finalized_at);
        """
    )
    for (definition,) in await conn.fetch(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = 'awa' AND tablename = 'jobs'"
    ):
        name = definition.split(" INDEX ", 1)[1].split(" ", 1)[0]
        await conn.execute(
            definition.replace("CREATE UNIQUE INDEX", "CREATE INDEX")
            .replace(f" {name} ", f" {name}_done ", 1)
            .replace(" ON awa.jobs ", " ON awa.jobs_done ", 1)
        )
    partitions = Partitions(partition_seconds)
    await partitions.keep(conn, retention=None)
    return partitions


@dataclass
class Partitions:
    """``awa.jobs_done``'s partitions: made ahead of time, dropped once wholly past retention."""

    width: int
    made: dict[int, str] = field(default_factory=dict)  # start (epoch seconds) -> table
    dropped: int = 0
    AHEAD = 4

    async def keep(self, conn: Any, retention: float | None) -> None:
        now = time.time()
        first = int(now // self.width)
        for k in range(first - 1, first + self.AHEAD):
            start = int(k * self.width)
            if start in self.made:
                continue
            name = f"awa.jobs_done_{start}"
            await conn.execute(
                f"CREATE TABLE {name} PARTITION OF awa.jobs_done FOR VALUES FROM "
                f"(to_timestamp({start})) TO (to_timestamp({start + self.width}))"
            )
            self.made[start] = name
        if retention is None:
            return
        for start, name in sorted(self.made.items()):
            if start + self.width > now - retention:
                break
            await conn.execute(f"ALTER TABLE awa.jobs_done DETACH PARTITION {name} CONCURRENTLY")
            await conn.execute(f"DROP TABLE {name}")
            del self.made[start]
            self.dropped += 1


async def complete_sql(conn: Any) -> str:
    columns = [
        r[0]
        for r in await conn.fetch(
            "SELECT attname FROM pg_attribute WHERE attrelid = 'awa.jobs'::regclass AND attnum > 0"
            " AND NOT attisdropped ORDER BY attnum"
        )
    ]
    values = [COMPLETED_VALUES.get(c, c) for c in columns]
    return COMPLETE_SPLIT.format(columns=", ".join(columns), values=", ".join(values))


# -- one layout's database ---------------------------------------------------------------------


class Layout:
    """A database with one layout; the SQL-only loop's connections and the retention on it."""

    def __init__(self, layout: str, url: str, args: argparse.Namespace) -> None:
        self.layout = layout
        self.url = url
        self.args = args
        self.live = LIVE[layout]
        self.conns: list[Any] = []
        self.admin: Any = None
        self.partitions: Partitions | None = None
        self.complete = COMPLETE_ONE_TABLE
        self.waited: list[float] = []  # seconds, since the last read
        self.handled = 0

    async def open(self) -> None:
        import asyncpg

        await asyncio.to_thread(_migrate, self.url)
        self.admin = await asyncpg.connect(self.url)
        if self.layout == SPLIT:
            self.partitions = await make_split(self.admin, self.args.partition_seconds)
            self.complete = await complete_sql(self.admin)
        self.conns = [
            await asyncpg.connect(self.url, server_settings=OWN_STATEMENT_SETTINGS)
            for _ in range(self.args.connections)
        ]

    async def close(self) -> None:
        for conn in [*self.conns, self.admin]:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()

    async def loop(self, k: int, stop: asyncio.Event | None) -> None:
        """Claim and complete until nothing is left (``stop`` None) or until ``stop`` is set."""
        conn = self.conns[k]
        claim = await conn.prepare(bench_scale.claim_sql(self.live, waited=True))
        complete = await conn.prepare(self.complete)
        batch, queue = self.args.batch, bp.QUEUE
        after: tuple[Any, ...] = FROM_THE_START
        while stop is None or not stop.is_set():
            row = await claim.fetchrow(queue, batch, *after)
            if row is None:
                if stop is None and after is FROM_THE_START:
                    return
                if after is FROM_THE_START:
                    await asyncio.sleep(IDLE_SECONDS)
                after = FROM_THE_START
                continue
            ids = row["ids"]
            await complete.fetch(ids)
            self.handled += len(ids)
            self.waited.extend(row["waited"])
            after = (row["priority"], row["run_at"], row["last_id"]) if len(ids) == batch else FROM_THE_START

    async def retention(self, stop: asyncio.Event) -> None:
        """The layout's retention every ``--cleanup-interval`` seconds, until ``stop``."""
        import asyncpg

        retention = self.args.retention
        conn = await asyncpg.connect(self.url, server_settings=LEADER_SETTINGS)  # as the leader's own
        try:
            while not stop.is_set():
                if self.partitions is not None:
                    await self.partitions.keep(conn, retention)
                else:
                    while (await delete_finished(conn, retention, retention, Cleanup.batch))[1] >= Cleanup.batch:
                        pass
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.args.cleanup_interval)
        finally:
            await conn.close()

    async def empty(self) -> None:
        """Back to no jobs at all, vacuumed: every drain round starts from the same tables."""
        await self.admin.execute(f"TRUNCATE {self.live}")
        if self.layout == SPLIT:
            await self.admin.execute("TRUNCATE awa.jobs_done")
        await self.admin.execute(f"VACUUM ANALYZE {self.live}")

    async def ready(self, retention: float | None = None) -> None:
        """The split's partitions for now and the next few widths (completions must find one), and
        with ``retention`` none of the older ones left."""
        if self.partitions is not None:
            await self.partitions.keep(self.admin, retention)

    async def drain(self, n: int) -> float:
        await self.ready()
        await self.admin.execute(ENQUEUE_SQL.format(live=self.live), bp.KIND, bp.QUEUE, n)
        await self.admin.execute(f"ANALYZE {self.live}")
        began = time.perf_counter()
        await asyncio.gather(*(self.loop(k, None) for k in range(len(self.conns))))
        elapsed = time.perf_counter() - began
        left = await self.admin.fetchval(LEFT_SQL.format(live=self.live))
        if left:
            raise RuntimeError(f"{self.layout}: the loop left {left} jobs")
        await self.empty()
        return n / elapsed


def _migrate(url: str) -> None:
    import awa_bridge

    awa_bridge.migrate(url)


# -- sustained load ------------------------------------------------------------------------------


async def sustained(db: Layout, args: argparse.Namespace) -> list[bs.Interval]:
    """``--rate`` jobs/s produced and claimed for ``--minutes``, one Interval per report period."""
    import asyncpg

    producer_conn = await asyncpg.connect(db.url)
    enqueue = ENQUEUE_SQL.format(live=db.live)

    async def insert(rows: list[tuple[int, float]]) -> Any:
        return await producer_conn.execute(enqueue, bp.KIND, bp.QUEUE, len(rows))

    producer = bs.Producer(insert, args.rate)
    stop = asyncio.Event()
    # Before the first completion, not raced by the retention task's first pass; the partitions
    # left from the drains (emptied) go first, so that the count is of what this run drops.
    await db.ready(args.retention)
    if db.partitions is not None:
        db.partitions.dropped = 0
    tasks = [
        asyncio.create_task(producer.run()),
        asyncio.create_task(db.retention(stop)),
        *(asyncio.create_task(db.loop(k, stop)) for k in range(len(db.conns))),
    ]
    intervals: list[bs.Interval] = []
    try:
        stats = await db.admin.fetchrow(bs.TABLES_SQL)
        last_av = (int(stats["autovacuums"]), int(stats["autoanalyzes"]))
        t0 = last_t = time.perf_counter()
        last_sent, db.handled, db.waited = producer.sent, 0, []
        seconds = args.minutes * 60
        say(f"\n{db.layout}: {args.rate:,.0f} jobs/s for {args.minutes:g} min")
        say(bs.HEADER)
        periods = max(1, round(seconds / args.report_seconds))
        for k in range(1, periods + 1):
            while time.perf_counter() < t0 + k * args.report_seconds:
                for task in tasks:
                    if task.done():
                        task.result()  # a failed part ends the run with its error
                        raise RuntimeError(f"{db.layout}: a part of the run stopped")
                await asyncio.sleep(min(0.5, max(0.0, t0 + k * args.report_seconds - time.perf_counter())))
            now = time.perf_counter()
            live, finished = await db.admin.fetchrow(ROWS_SQL[db.layout])
            stats = await db.admin.fetchrow(bs.TABLES_SQL)
            samples = sorted(w * 1000 for w in db.waited)
            av = (int(stats["autovacuums"]), int(stats["autoanalyzes"]))
            iv = bs.Interval(
                end=now - t0,
                seconds=now - last_t,
                produced=producer.sent - last_sent,
                handled=db.handled,
                p50=bs.pct(samples, 50),
                p95=bs.pct(samples, 95),
                p99=bs.pct(samples, 99),
                live=int(live),
                finished=int(finished),
                heap=int(stats["heap"]),
                indexes=int(stats["indexes"]),
                dead=int(stats["dead"]),
                # a dropped partition takes its counts with it
                autovacuums=max(0, av[0] - last_av[0]),
                autoanalyzes=max(0, av[1] - last_av[1]),
                vacuuming=int(stats["vacuuming"]),
            )
            intervals.append(iv)
            say(bs.interval_line(iv))
            last_av, last_t, last_sent, db.handled, db.waited = av, now, producer.sent, 0, []
    finally:
        producer.stop()
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await producer_conn.close()
    return intervals


# -- the run ---------------------------------------------------------------------------------------


@dataclass
class Result:
    layout: str
    drains: list[float] = field(default_factory=list)
    intervals: list[bs.Interval] = field(default_factory=list)
    verdict: bs.Verdict | None = None
    dropped: int = 0


async def run(args: argparse.Namespace, server_url: str, results: dict[str, Result]) -> None:
    dbs = bw.Databases(server_url)
    layouts: dict[str, Layout] = {}
    try:
        for name in LAYOUTS:
            db = layouts[name] = Layout(name, dbs.url(dbs.template(name.replace(" ", "_"))), args)
            await db.open()
            results[name] = Result(name)
        if args.drain_jobs:
            for r in range(args.rounds):
                for name in LAYOUTS if r % 2 == 0 else reversed(LAYOUTS):
                    rate = await layouts[name].drain(args.drain_jobs)
                    results[name].drains.append(rate)
                    say(f"  drain round {r + 1} {name}: {rate:,.0f} jobs/s")
        if args.minutes:
            for name in LAYOUTS:
                res = results[name]
                res.intervals = await sustained(layouts[name], args)
                res.verdict = bs.judge(res.intervals, args.rate, args.window_minutes * 60, args.retention)
                partitions = layouts[name].partitions
                res.dropped = partitions.dropped if partitions is not None else 0
    finally:
        for db in layouts.values():
            await db.close()
        dbs.drop_all()


def report(args: argparse.Namespace, where: str, results: dict[str, Result]) -> str:
    out = [
        f"# Storage layouts, SQL-only ({where})",
        "",
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs; the SQL-only claim + complete loop on "
        f"{args.connections} connection(s), claim batch {args.batch}; no worker. Split: live jobs in awa.jobs_live, "
        f"finished ones moved to awa.jobs_done in {args.partition_seconds:g}-second partitions.",
        "",
    ]
    if args.drain_jobs and all(r.drains for r in results.values()):
        one, split = (statistics.median(results[n].drains) for n in LAYOUTS)
        out += [
            f"## Drain: {args.drain_jobs:,} queued jobs, median of {args.rounds} interleaved rounds",
            "",
            "| layout | jobs/s | rounds |",
            "|---|---:|---|",
            *(
                f"| {n} | {statistics.median(results[n].drains):,.0f} | "
                f"{', '.join(f'{x:,.0f}' for x in results[n].drains)} |"
                for n in LAYOUTS
            ),
            "",
            f"Split / one table: **{split / one:.2f}x**",
            "",
        ]
    for name in LAYOUTS:
        res = results.get(name)
        if res is None or not res.intervals:
            continue
        out += [
            f"## {name}: {args.rate:,.0f} jobs/s for {args.minutes:g} min, retention {args.retention:g} s",
            "",
            bs.HEADER,
            "|---|" + "---:|" * 12,
            *(bs.interval_line(iv) for iv in res.intervals),
            "",
        ]
        if name == SPLIT:
            out += [f"Partitions dropped by retention: {res.dropped}.", ""]
        if res.verdict is not None:
            out += [f"Verdict: **{res.verdict.word}**", *(f"- {line}" for line in res.verdict.lines), ""]
    done = [results[n] for n in LAYOUTS if n in results and results[n].intervals]
    if len(done) == len(LAYOUTS):
        out += [
            "## Sustained, side by side",
            "",
            "| layout | handled/s | p95 ms, median of periods (max) | p99 ms, max | dead tuples, max "
            "| tables + indexes MB, end |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for res in done:
            ivs = res.intervals
            p95s = [iv.p95 for iv in ivs if iv.p95 is not None]
            p99s = [iv.p99 for iv in ivs if iv.p99 is not None]
            rate = sum(iv.handled for iv in ivs) / sum(iv.seconds for iv in ivs)
            out.append(
                f"| {res.layout} | {rate:,.0f} | {bs.ms(statistics.median(p95s) if p95s else None)} "
                f"({bs.ms(max(p95s) if p95s else None)}) | {bs.ms(max(p99s) if p99s else None)} "
                f"| {max(iv.dead for iv in ivs):,} | {bs.mb(ivs[-1].size)} |"
            )
        out.append("")
    return "\n".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], epilog="See benchmarks/README.md for what each figure means."
    )
    parser.add_argument(
        "--database-url", default=os.environ.get("DATABASE_URL"), help="server to use (a database on it)"
    )
    parser.add_argument("--drain-jobs", type=int, default=250_000, help="jobs per drain (250,000; 0 to skip)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved drain rounds (3)")
    parser.add_argument("--rate", type=float, default=8_000.0, help="sustained jobs/s (8,000)")
    parser.add_argument("--minutes", type=float, default=5.0, help="sustained minutes per layout (5; 0 to skip)")
    parser.add_argument("--retention", type=float, default=120.0, help="seconds finished jobs are kept (120)")
    parser.add_argument(
        "--partition-seconds", type=int, default=60, help="the split's partition width in whole seconds (60)"
    )
    parser.add_argument(
        "--cleanup-interval",
        type=float,
        default=DEFAULT_CLEANUP_INTERVAL_SECONDS,
        help=f"seconds between retention passes (the worker's default, {DEFAULT_CLEANUP_INTERVAL_SECONDS:g})",
    )
    parser.add_argument("--report-seconds", type=float, default=30.0, help="seconds per report line (30)")
    parser.add_argument(
        "--window-minutes", type=float, default=1.0, help="the verdict's first and last windows (1 minute)"
    )
    parser.add_argument("--connections", type=int, default=2, help="the loop's connections (2)")
    parser.add_argument("--batch", type=int, default=DEFAULT_CLAIM_BATCH, help="claim batch (the worker's)")
    args = parser.parse_args(argv)
    bp.require_positive(parser, args, "--rounds", "--connections", "--batch")
    for option in ("--drain-jobs", "--minutes"):
        if getattr(args, option.lstrip("-").replace("-", "_")) < 0:
            parser.error(f"{option} must be at least 0")
    for option in ("--rate", "--retention", "--partition-seconds", "--cleanup-interval", "--report-seconds"):
        if getattr(args, option.lstrip("-").replace("-", "_")) <= 0:
            parser.error(f"{option} must be more than 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    url, _embedded, where = bp.server(args.database_url)  # kept referenced: it stops with the process
    results: dict[str, Result] = {}
    asyncio.run(run(args, url, results))
    print(report(args, where, results))
    return 0


if __name__ == "__main__":
    bp.run_main(main)
