"""Soak benchmark: a steady producer plus workers for a long run; does the cost stay flat?

A producer inserts no-op jobs at a steady rate (``--rate``, default 2,000
jobs/s, in one COPY / batch insert every 20 ms) while worker processes drain
them, for ``--minutes`` (default 30). awa_bridge's worker runs with a short
retention (``--retention``, default 120 s, passed as ``completed_retention``),
so finished rows should be deleted about as fast as they are made. Every
``--report-seconds`` (default 60) it prints one line: produced and handled
jobs/s, pickup latency p50/p95/p99, live and finished rows, heap and index
size of the system's tables, dead tuples and autovacuum/autoanalyze runs
(``pg_stat_user_tables``). At the end, a verdict: the last 5 minutes within
10% of the first 5 on throughput and on p95, no period whose p95 stalled
(seconds against the run's milliseconds), and the table size bounded (see
``--help`` of ``--window-minutes``).

``--find-max`` first ramps the rate in steps to find the highest one this
machine sustains (handled keeps up with produced, no backlog builds, p95 under
``--max-p95-ms``), then soaks at that rate (``--minutes 0``: ramp only).

``--systems awa_bridge,pgqueuer,procrastinate`` runs the same soak against
the peers, one after the other in the same run (``--peer-minutes``), each on
its own database with its default settings, and prints a comparison table.

    python benchmarks/bench_soak.py --database-url postgresql://postgres@127.0.0.1:5432/postgres

Every database it creates (``awa_benchw_<pid>_<system>``) is dropped at the
end, also on Ctrl-C or an error; every worker process is stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import platform
import signal
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_procs as bp
import bench_worker as bw

SYSTEMS = bp.CHILD_SYSTEMS
TICK_SECONDS = 0.02

Insert = Callable[[list[tuple[int, float]]], Awaitable[Any]]


# -- per system: install, produce, count ----------------------------------------------


@dataclass
class SoakSystem:
    name: str
    install: Callable[[str], Awaitable[None]]
    open_producer: Callable[[str], Awaitable[tuple[Insert, Callable[[], Awaitable[Any]]]]]
    rows_sql: str  # one row: live (not finished yet), finished (kept in the database)
    notes: str


def bridge() -> SoakSystem:
    import asyncpg

    import awa_bridge

    async def open_producer(url: str) -> tuple[Insert, Callable[[], Awaitable[Any]]]:
        conn = await asyncpg.connect(url)

        async def insert(rows: list[tuple[int, float]]) -> Any:
            return await awa_bridge.insert_many(conn, [{"i": i, "t": t} for i, t in rows], kind=bp.KIND, queue=bp.QUEUE)

        return insert, conn.close

    return SoakSystem(
        "awa_bridge",
        bw.bridge_system().install,
        open_producer,
        "SELECT count(*) FILTER (WHERE state NOT IN ('completed', 'failed', 'cancelled')),"
        " count(*) FILTER (WHERE state IN ('completed', 'failed', 'cancelled')) FROM awa.jobs",
        "insert_many (COPY); worker keeps finished jobs for completed_retention, then deletes them",
    )


def pgqueuer() -> SoakSystem:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    async def open_producer(url: str) -> tuple[Insert, Callable[[], Awaitable[Any]]]:
        conn = await asyncpg.connect(url)
        queries = Queries(AsyncpgDriver(conn))

        async def insert(rows: list[tuple[int, float]]) -> Any:
            payloads: list[bytes | None] = [json.dumps({"i": i, "t": t}).encode() for i, t in rows]
            return await queries.enqueue([bp.KIND] * len(rows), payloads, [0] * len(rows))

        return insert, conn.close

    return SoakSystem(
        "pgqueuer",
        bw.pgqueuer_system().install,
        open_producer,
        "SELECT (SELECT count(*) FROM pgqueuer), (SELECT count(*) FROM pgqueuer_log)",
        "Queries.enqueue (lists); finished jobs are deleted, their log rows kept (finished = pgqueuer_log rows)",
    )


def procrastinate() -> SoakSystem:
    import procrastinate as proc

    async def open_producer(url: str) -> tuple[Insert, Callable[[], Awaitable[Any]]]:
        app = proc.App(connector=proc.PsycopgConnector(conninfo=url, min_size=1, max_size=2))
        app.task(name=bp.KIND, queue=bp.QUEUE)(bw._procrastinate_noop)
        await app.open_async()
        task = app.tasks[bp.KIND]

        async def insert(rows: list[tuple[int, float]]) -> Any:
            batch: list[Any] = [{"i": i, "t": t} for i, t in rows]
            return await task.batch_defer_async(*batch)

        return insert, app.close_async

    return SoakSystem(
        "procrastinate",
        bw.procrastinate_system().install,
        open_producer,
        "SELECT count(*) FILTER (WHERE status IN ('todo', 'doing')),"
        " count(*) FILTER (WHERE status NOT IN ('todo', 'doing')) FROM procrastinate_jobs",
        "batch_defer_async; worker defaults (finished jobs kept: delete_jobs is 'never' by default)",
    )


LOADERS: dict[str, tuple[list[str], Callable[[], SoakSystem]]] = {
    "awa_bridge": (["asyncpg", "psycopg"], bridge),
    "pgqueuer": (["pgqueuer", "asyncpg"], pgqueuer),
    "procrastinate": (["procrastinate"], procrastinate),
}


# -- the producer ------------------------------------------------------------------------


class Producer:
    """Inserts at ``rate`` jobs/s on a fixed schedule, one batch per tick; the rate can change."""

    def __init__(self, insert: Insert, rate: float) -> None:
        self.insert = insert
        self.sent = 0
        self.rate = rate
        self._base_t = time.perf_counter()
        self._base_n = 0
        self._stop = asyncio.Event()

    def set_rate(self, rate: float) -> None:
        self.rate = rate
        self._base_t = time.perf_counter()
        self._base_n = self.sent

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        self.set_rate(self.rate)
        next_tick = time.perf_counter()
        while not self._stop.is_set():
            now = time.perf_counter()
            due = self._base_n + int(self.rate * (now - self._base_t)) - self.sent
            # A producer that fell behind catches up at most a second's worth at a time.
            n = min(due, max(1, int(self.rate)))
            if n > 0:
                t = time.time()
                await self.insert([(self.sent + k, t) for k in range(n)])
                self.sent += n
            next_tick += TICK_SECONDS
            delay = next_tick - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                next_tick = time.perf_counter()
                await asyncio.sleep(0)


# -- database figures ----------------------------------------------------------------------

TABLES_SQL = """
SELECT coalesce(sum(pg_table_size(relid)), 0)::bigint AS heap,
       coalesce(sum(pg_indexes_size(relid)), 0)::bigint AS indexes,
       coalesce(sum(n_dead_tup), 0)::bigint AS dead,
       coalesce(sum(autovacuum_count), 0)::bigint AS autovacuums,
       coalesce(sum(autoanalyze_count), 0)::bigint AS autoanalyzes,
       (SELECT count(*) FROM pg_stat_progress_vacuum WHERE datname = current_database()) AS vacuuming
FROM pg_stat_user_tables
"""


@dataclass
class Interval:
    """One report period."""

    end: float  # seconds since the soak started
    seconds: float
    produced: int
    handled: int
    p50: float | None  # ms
    p95: float | None
    p99: float | None
    live: int
    finished: int
    heap: int  # bytes, all of the system's tables
    indexes: int
    dead: int
    autovacuums: int  # runs started during the period
    autoanalyzes: int
    vacuuming: int  # autovacuum / vacuum workers busy at the end

    @property
    def produced_rate(self) -> float:
        return self.produced / self.seconds

    @property
    def rate(self) -> float:
        return self.handled / self.seconds

    @property
    def size(self) -> int:
        return self.heap + self.indexes


def pct(samples: list[float], p: float) -> float | None:
    return bw.percentile(samples, p) if samples else None


class Meter:
    """Reads the workers' and the database's figures once per period."""

    def __init__(self, system: SoakSystem, conn: Any, workers: list[bp.Worker], producer: Producer) -> None:
        self.system = system
        self.conn = conn
        self.workers = workers
        self.producer = producer
        self.t0 = time.perf_counter()
        self.last_t = self.t0
        self.last_sent = producer.sent
        self.last_av = (0, 0)

    async def reset(self) -> None:
        """Start a new period now (drops what the workers recorded so far)."""
        for w in self.workers:
            await w.stats()
        row = await self.conn.fetchrow(TABLES_SQL)
        self.last_av = (row["autovacuums"], row["autoanalyzes"])
        self.last_t = time.perf_counter()
        self.last_sent = self.producer.sent

    async def read(self) -> Interval:
        handled = 0
        latencies: list[float] = []
        for w in self.workers:
            got = await w.stats()
            handled += got["handled"]
            latencies.extend(got["latencies"])
        now = time.perf_counter()
        sent = self.producer.sent
        live, finished = await self.conn.fetchrow(self.system.rows_sql)
        row = await self.conn.fetchrow(TABLES_SQL)
        samples = sorted(latencies)
        interval = Interval(
            end=now - self.t0,
            seconds=now - self.last_t,
            produced=sent - self.last_sent,
            handled=handled,
            p50=pct(samples, 50),
            p95=pct(samples, 95),
            p99=pct(samples, 99),
            live=int(live),
            finished=int(finished),
            heap=int(row["heap"]),
            indexes=int(row["indexes"]),
            dead=int(row["dead"]),
            autovacuums=int(row["autovacuums"]) - self.last_av[0],
            autoanalyzes=int(row["autoanalyzes"]) - self.last_av[1],
            vacuuming=int(row["vacuuming"]),
        )
        self.last_av = (int(row["autovacuums"]), int(row["autoanalyzes"]))
        self.last_t = now
        self.last_sent = sent
        return interval


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def mb(value: int) -> str:
    return f"{value / 2**20:,.1f}"


HEADER = (
    "| at m:ss | produced/s | handled/s | p50 ms | p95 ms | p99 ms | live rows | finished rows "
    "| heap MB | index MB | dead tuples | autovacuum | autoanalyze |"
)


def clock(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


def interval_line(iv: Interval) -> str:
    vac = f"{iv.autovacuums}" + (" (running)" if iv.vacuuming else "")
    return (
        f"| {clock(iv.end)} | {iv.produced_rate:,.0f} | {iv.rate:,.0f} | {ms(iv.p50)} | {ms(iv.p95)} | {ms(iv.p99)} "
        f"| {iv.live:,} | {iv.finished:,} | {mb(iv.heap)} | {mb(iv.indexes)} | {iv.dead:,} | {vac} "
        f"| {iv.autoanalyzes} |"
    )


# -- verdict --------------------------------------------------------------------------------


@dataclass
class Verdict:
    passed: bool
    lines: list[str]
    size_judged: bool = False
    first_rate: float = 0.0
    last_rate: float = 0.0
    first_p95: float | None = None
    last_p95: float | None = None
    size_ref: int = 0
    size_end: int = 0

    @property
    def word(self) -> str:
        if not self.passed:
            return "FAIL"
        return "PASS" if self.size_judged else "PASS (size not judged)"


def windows(intervals: list[Interval], window_s: float) -> tuple[list[Interval], list[Interval]]:
    """The first and last ``window_s`` seconds of intervals (each at most a third of the run)."""
    per = intervals[0].seconds if intervals else 1.0
    k = max(1, min(round(window_s / per), len(intervals) // 3 or 1))
    return intervals[:k], intervals[-k:]


def weighted_p95(ivs: list[Interval]) -> float | None:
    values = [iv.p95 for iv in ivs if iv.p95 is not None]
    return sorted(values)[len(values) // 2] if values else None  # median of the per-period p95s


def p95_trend(intervals: list[Interval]) -> str | None:
    """The least-squares slope of the per-period p95 over ``intervals``, as a line of the verdict.

    Not judged: the verdict compares two windows' medians, and on a small machine
    one noisy minute can move a median by 10%. A slope over every settled period
    says whether that difference is a growth (a steady climb) or noise (no slope).
    """
    points = [(iv.end / 60, iv.p95) for iv in intervals if iv.p95 is not None]
    if len(points) < 5:
        return None
    minutes, p95s = zip(*points, strict=True)
    slope = statistics.linear_regression(minutes, p95s).slope * 10
    mean = statistics.fmean(p95s)
    return (
        f"pickup p95 trend from {clock(intervals[0].end)} to the end (least squares, not judged): "
        f"{slope:+.2f} ms per 10 min ({slope / mean * 100:+.1f}% of its mean {mean:.1f} ms)"
    )


#: A period whose pickup p95 is this many times the run's median, and past STALL_MIN_MS, stalled.
STALL_FACTOR = 10
STALL_MIN_MS = 1000.0


def stalled_period(intervals: list[Interval]) -> str | None:
    """A line of the verdict for the worst period whose p95 stalled (seconds where the run's median is
    milliseconds), or None. The window comparison misses a stall in the first window: its median
    then only makes the first window's p95 look worse than the last's (a worker that started with
    plans made on an empty table read 5-10 s for its first 30 s, 2026-12-07)."""
    p95s = [iv.p95 for iv in intervals if iv.p95 is not None]
    if len(p95s) < 3:
        return None
    median = statistics.median(p95s)
    worst = max((iv for iv in intervals if iv.p95 is not None), key=lambda iv: iv.p95 or 0.0)
    assert worst.p95 is not None
    if worst.p95 < max(STALL_FACTOR * median, STALL_MIN_MS):
        return None
    return (
        f"stall: pickup p95 {worst.p95:,.1f} ms in the period ending {clock(worst.end)}, "
        f"{worst.p95 / median:,.0f}x the run's median of {median:.1f} ms: FAIL"
    )


def judge(intervals: list[Interval], rate: float, window_s: float, retention: float | None) -> Verdict:
    if len(intervals) < 2:
        return Verdict(False, ["verdict: not judged (fewer than 2 report periods)"])
    first, last = windows(intervals, window_s)
    first_rate = sum(iv.handled for iv in first) / sum(iv.seconds for iv in first)
    last_rate = sum(iv.handled for iv in last) / sum(iv.seconds for iv in last)
    p95_a, p95_b = weighted_p95(first), weighted_p95(last)
    lines: list[str] = []
    ok = True

    rate_ok = abs(last_rate - first_rate) <= 0.10 * first_rate if first_rate else False
    kept_up = last_rate >= 0.95 * rate
    ok &= rate_ok and kept_up
    lines.append(
        f"throughput: first {first_rate:,.0f}/s, last {last_rate:,.0f}/s "
        f"({(last_rate / first_rate - 1) * 100 if first_rate else 0:+.1f}%, limit 10%) "
        f"{'ok' if rate_ok else 'FAIL'}; offered {rate:,.0f}/s: {'kept up' if kept_up else 'FELL BEHIND'}"
    )
    if p95_a is not None and p95_b is not None:
        p95_ok = p95_b <= 1.10 * p95_a
        ok &= p95_ok
        lines.append(
            f"pickup p95 (median of the periods): first {p95_a:.1f} ms, last {p95_b:.1f} ms "
            f"({(p95_b / p95_a - 1) * 100:+.1f}%, limit +10%) {'ok' if p95_ok else 'FAIL'}"
        )
    else:
        ok = False
        lines.append("pickup p95: no samples")

    # Size: compared from the first period after retention had time to act
    # (the table fills for one retention window first), to the end.
    settle = (retention or 0) + 60
    ref = next((iv for iv in intervals if iv.end >= settle + first[-1].end), None)
    size_ref = ref.size if ref is not None else 0
    size_end = intervals[-1].size
    judged = ref is not None and ref is not intervals[-1]
    if ref is None or not judged:
        lines.append(
            f"table size: not judged (run shorter than retention + 1 minute + the first window); "
            f"{mb(size_end)} MB at the end"
        )
    else:
        size_ok = size_end <= 1.25 * size_ref
        ok &= size_ok
        lines.append(
            f"table size: {mb(size_ref)} MB at {clock(ref.end)}, {mb(size_end)} MB at the end "
            f"(limit +25%) {'ok' if size_ok else 'FAIL: growing'}"
        )
    stall = stalled_period(intervals)
    if stall is not None:
        ok = False
        lines.append(stall)
    settled = [iv for iv in intervals if iv.end >= ref.end] if ref is not None else intervals
    drift = p95_trend(settled)
    if drift is not None:
        lines.append(drift)
    backlog_ok = intervals[-1].live <= max(1000, rate * 2)
    ok &= backlog_ok
    lines.append(f"backlog at the end: {intervals[-1].live:,} live rows {'ok' if backlog_ok else 'FAIL: growing'}")
    return Verdict(ok, lines, judged, first_rate, last_rate, p95_a, p95_b, size_ref, size_end)


# -- running one system ----------------------------------------------------------------------


@dataclass
class Outcome:
    system: str
    rate: float
    minutes: float
    intervals: list[Interval] = field(default_factory=list)
    verdict: Verdict | None = None
    max_rate: float | None = None
    error: str | None = None


class Session:
    """One system's database, workers and producer, all torn down by ``close``."""

    def __init__(self, system: SoakSystem, url: str, args: argparse.Namespace, *, ledger: bool = False) -> None:
        self.system = system
        self.url = url
        self.args = args
        self.ledger = ledger  # the workers write the ids they handle (bench_procs.Worker.ids)
        self.workers: list[bp.Worker] = []
        self.conn: Any = None
        self.producer: Producer | None = None
        self._producer_task: asyncio.Task[None] | None = None
        self._close_insert: Callable[[], Awaitable[Any]] | None = None

    async def open(self, rate: float) -> Meter:
        import asyncpg

        config: dict[str, Any] = {}
        if self.system.name == "awa_bridge":
            config = {"completed_retention": self.args.retention, **json.loads(self.args.bridge_config or "{}")}
        self.workers = [
            bp.Worker(self.system.name, self.url, self.args.concurrency, bridge_config=config, ledger=self.ledger)
            for _ in range(self.args.processes)
        ]
        for w in self.workers:
            await w.spawn()
        for w in self.workers:
            await w.start()
        self.conn = await asyncpg.connect(self.url)
        insert, self._close_insert = await self.system.open_producer(self.url)
        self.producer = Producer(insert, rate)
        self._producer_task = asyncio.create_task(self.producer.run())
        return Meter(self.system, self.conn, self.workers, self.producer)

    def check_producer(self) -> None:
        if self._producer_task is not None and self._producer_task.done():
            self._producer_task.result()  # raises the producer's error
            raise RuntimeError("the producer stopped")

    async def close(self) -> None:
        if self.producer is not None:
            self.producer.stop()
        if self._producer_task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._producer_task, 10)
        if self._close_insert is not None:
            with contextlib.suppress(Exception):
                await self._close_insert()
        for w in self.workers:
            with contextlib.suppress(Exception):
                await w.stop(timeout=30)
        for w in self.workers:
            await w.kill()
            w.cleanup()
        if self.conn is not None:
            with contextlib.suppress(Exception):
                await self.conn.close()


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def soak(session: Session, meter: Meter, rate: float, seconds: float, intervals: list[Interval]) -> None:
    """Run at ``rate`` for ``seconds``, appending one Interval per period to ``intervals`` as it goes."""
    assert session.producer is not None
    session.producer.set_rate(rate)
    await meter.reset()
    meter.t0 = meter.last_t
    say(f"\n{session.system.name}: soak at {rate:,.0f} jobs/s for {seconds / 60:g} min")
    say(HEADER)
    periods = max(1, math.ceil(seconds / session.args.report_seconds - 1e-9))
    for k in range(1, periods + 1):
        target = meter.t0 + min(seconds, k * session.args.report_seconds)
        while time.perf_counter() < target:
            session.check_producer()
            await asyncio.sleep(min(0.5, max(0.0, target - time.perf_counter())))
        iv = await meter.read()
        intervals.append(iv)
        say(interval_line(iv))


async def live_rows(session: Session) -> int:
    live, _ = await session.conn.fetchrow(session.system.rows_sql)
    return int(live)


async def find_max(session: Session, meter: Meter, args: argparse.Namespace) -> float | None:
    """Ramp the rate (x2 while sustained, then bisect); the highest rate sustained, or None."""
    assert session.producer is not None
    # A step shorter than the retention never meets the cleanup of its own jobs: at 13,000 jobs/s
    # 30-second steps passed where a soak failed once deletions began, two minutes in (2026-12-05).
    settle = args.step_settle if args.step_settle is not None else args.retention + 30
    say(
        f"\n{session.system.name}: finding the highest sustained rate "
        f"(each step {settle:g} s to settle, then {args.step_seconds:g} s measured)"
    )
    say("| offered/s | produced/s | handled/s | p95 ms | live at end | sustained |")

    async def step(rate: float) -> bool:
        assert session.producer is not None
        session.producer.set_rate(rate)
        await asyncio.sleep(settle)
        await meter.reset()
        await asyncio.sleep(args.step_seconds)
        session.check_producer()
        iv = await meter.read()
        ok = (
            iv.produced_rate >= 0.95 * rate
            and iv.rate >= 0.95 * iv.produced_rate
            and iv.live <= max(200, rate * 0.5)
            and iv.p95 is not None
            and iv.p95 <= args.max_p95_ms
        )
        say(
            f"| {rate:,.0f} | {iv.produced_rate:,.0f} | {iv.rate:,.0f} | {ms(iv.p95)} | {iv.live:,} "
            f"| {'yes' if ok else 'no'} |"
        )
        # Let the backlog drain before the next step.
        session.producer.set_rate(0)
        deadline = time.perf_counter() + 120
        while await live_rows(session) > 0 and time.perf_counter() < deadline:
            await asyncio.sleep(0.2)
        return ok

    best: float | None = None
    rate = float(args.start_rate)
    failed: float | None = None
    while rate <= args.max_rate:
        if await step(rate):
            best = rate
            rate *= 2
        else:
            failed = rate
            break
    if best is not None and failed is not None:
        lo, hi = best, failed
        for _ in range(args.bisect):
            mid = round((lo + hi) / 2, -1)
            if mid in (lo, hi):
                break
            if await step(mid):
                lo = best = mid
            else:
                hi = mid
    say(f"{session.system.name}: highest sustained rate {'-' if best is None else f'{best:,.0f} jobs/s'}")
    return best


async def run_system(
    system: SoakSystem, dbs: bw.Databases, args: argparse.Namespace, minutes: float, outcomes: list[Outcome]
) -> None:
    outcome = Outcome(system.name, args.rate, minutes)
    outcomes.append(outcome)
    name = dbs.template(system.name)
    url = dbs.url(name)
    session = Session(system, url, args)
    try:
        await system.install(url)
        meter = await session.open(0 if args.find_max else args.rate)
        if args.find_max:
            outcome.max_rate = await find_max(session, meter, args)
            if outcome.max_rate is None:
                outcome.error = f"no rate from {args.start_rate:g}/s up was sustained"
                return
            outcome.rate = outcome.max_rate
        if minutes > 0:
            await soak(session, meter, outcome.rate, minutes * 60, outcome.intervals)
            retention = args.retention if system.name == "awa_bridge" else None
            outcome.verdict = judge(outcome.intervals, outcome.rate, args.window_minutes * 60, retention)
            say(f"{system.name}: verdict {outcome.verdict.word}")
            for line in outcome.verdict.lines:
                say("  " + line)
    except Exception as exc:
        outcome.error = f"{type(exc).__name__}: {exc}"
        say(f"{system.name}: FAILED: {outcome.error}")
        for w in session.workers:
            tail = w.tail().strip()
            if tail:
                say(f"  {w.system} worker log: {tail[-600:]}")
    finally:
        await session.close()
        dbs.drop(name)


# -- report -----------------------------------------------------------------------------------


def report(args: argparse.Namespace, where: str, outcomes: list[Outcome], notes: list[str]) -> str:
    lines = [f"# Soak benchmark ({where})", ""]
    versions = ", ".join(f"{o.system} {bw._version(bw.DISTRIBUTIONS[o.system])}" for o in outcomes)
    lines.append(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs; {versions}. "
        f"{args.processes} worker process(es) x concurrency {args.concurrency}, no-op handlers; "
        f"awa_bridge completed_retention {args.retention:g} s"
        f"{', WorkerConfig overrides ' + args.bridge_config if args.bridge_config else ''}; event loops: "
        f"{bp.loop_names([o.system for o in outcomes], json.loads(args.bridge_config or '{}'))}. "
        f"Load average at start {bw.LOAD_AT_START}, at end {bw._loadavg()}."
    )
    for o in outcomes:
        lines += ["", f"## {o.system}: {o.rate:,.0f} jobs/s offered for {o.minutes:g} min", ""]
        if o.max_rate is not None:
            lines += [f"Highest sustained rate found: {o.max_rate:,.0f} jobs/s.", ""]
        if o.intervals:
            lines.append(HEADER)
            lines.append("|---|" + "---:|" * 12)
            lines += [interval_line(iv) for iv in o.intervals]
            lines.append("")
        if o.verdict is not None:
            lines.append(f"Verdict: **{o.verdict.word}**")
            lines += [f"- {line}" for line in o.verdict.lines]
        if o.error:
            lines.append(f"Error: {o.error}")
    if len(outcomes) > 1:
        lines += ["", "## Comparison (first vs last window)", ""]
        lines.append(
            "| system | offered/s | handled/s first | handled/s last | p95 ms first | p95 ms last "
            "| size MB (settled / end) | finished rows at end | verdict |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for o in outcomes:
            v = o.verdict
            if v is None:
                lines.append(f"| {o.system} | {o.rate:,.0f} | - | - | - | - | - | - | {o.error or 'not run'} |")
                continue
            end = o.intervals[-1]
            lines.append(
                f"| {o.system} | {o.rate:,.0f} | {v.first_rate:,.0f} | {v.last_rate:,.0f} | {ms(v.first_p95)} "
                f"| {ms(v.last_p95)} | {mb(v.size_ref) if v.size_judged else '-'} / {mb(v.size_end)} "
                f"| {end.finished:,} | {v.word} |"
            )
    lines += ["", "Settings:"]
    for o in outcomes:
        loader = LOADERS[o.system][1]
        lines.append(f"- {o.system}: {loader().notes}")
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], epilog="See benchmarks/README.md for what each figure means."
    )
    parser.add_argument(
        "--database-url", default=os.environ.get("DATABASE_URL"), help="server to use (a database on it)"
    )
    parser.add_argument("--rate", type=float, default=2000.0, help="jobs/s the producer offers (default 2000)")
    parser.add_argument("--minutes", type=float, default=30.0, help="soak length, awa_bridge (default 30; 0: none)")
    parser.add_argument(
        "--peer-minutes", type=float, help="soak length for the peers in --systems (default: as --minutes)"
    )
    parser.add_argument(
        "--retention",
        type=float,
        default=120.0,
        help="awa_bridge's completed_retention in seconds (default 120)",
    )
    parser.add_argument("--report-seconds", type=float, default=60.0, help="one line per this many seconds (60)")
    parser.add_argument(
        "--window-minutes",
        type=float,
        default=5.0,
        help="verdict compares the first and last this many minutes (default 5; at most a third of the run each)",
    )
    parser.add_argument("--processes", type=int, default=1, help="worker processes per system (default 1)")
    parser.add_argument("--concurrency", type=int, default=100, help="handlers per worker process (default 100)")
    parser.add_argument(
        "--systems",
        type=lambda s: s.split(","),
        default=["awa_bridge"],
        help=f"comma-separated, run one after the other: {','.join(SYSTEMS)} (default awa_bridge)",
    )
    parser.add_argument(
        "--bridge-config", metavar="JSON", help="more WorkerConfig overrides for awa_bridge (e.g. cleanup_interval)"
    )
    parser.add_argument("--find-max", action="store_true", help="first find the highest sustained rate, soak at it")
    parser.add_argument("--start-rate", type=float, default=500.0, help="--find-max: first step (default 500/s)")
    parser.add_argument("--max-rate", type=float, default=200_000.0, help="--find-max: stop doubling here")
    parser.add_argument("--step-seconds", type=float, default=30.0, help="--find-max: measured seconds per step (30)")
    parser.add_argument(
        "--step-settle",
        type=float,
        help="--find-max: seconds each step runs before it is measured (default: --retention + 30, so that "
        "the cleanup of the step's own finished jobs has begun)",
    )
    parser.add_argument("--bisect", type=int, default=3, help="--find-max: bisection steps after doubling (3)")
    parser.add_argument(
        "--max-p95-ms", type=float, default=100.0, help="--find-max: a step with a higher p95 is not sustained (100)"
    )
    args = parser.parse_args(argv)
    for name in args.systems:
        if name not in SYSTEMS:
            parser.error(f"--systems: unknown system {name!r} (choose from {', '.join(SYSTEMS)})")
    if args.rate <= 0:
        parser.error("--rate must be positive")
    if args.minutes < 0 or (args.peer_minutes is not None and args.peer_minutes < 0):
        parser.error("--minutes and --peer-minutes must be >= 0")
    if args.report_seconds <= 0 or args.retention <= 0 or args.window_minutes <= 0:
        parser.error("--report-seconds, --retention and --window-minutes must be positive")
    if args.processes < 1 or args.concurrency < 1:
        parser.error("--processes and --concurrency must be >= 1")
    if args.find_max and (args.start_rate <= 0 or args.step_seconds <= 0):
        parser.error("--start-rate and --step-seconds must be positive")
    if args.step_settle is not None and args.step_settle < 0:
        parser.error("--step-settle must be >= 0")
    if args.bridge_config:
        from awa_bridge.worker.config import WorkerConfig

        try:
            WorkerConfig(completed_retention=args.retention, **json.loads(args.bridge_config))
        except Exception as exc:
            parser.error(f"--bridge-config: {exc}")
    return args


async def run(args: argparse.Namespace, server_url: str, outcomes: list[Outcome], notes: list[str]) -> None:
    """Soak each system in turn; ``outcomes`` fills as it goes (so an interrupted run still reports)."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    dbs = bw.Databases(server_url)
    if await server_setting(server_url, "autovacuum") != "on":
        # Every queue here turns over its rows: without autovacuum no table stays bounded, and
        # the run measures the server's configuration (CI's PostgreSQL service runs so).
        warning = "autovacuum is off on this server: dead rows are never reclaimed, so no system's tables stay bounded"
        say(f"warning: {warning}")
        notes.append(warning)
    try:
        for name in args.systems:
            modules, loader = LOADERS[name]
            missing = [m for m in modules if not bw._available(m)]
            if missing:
                notes.append(f"{name}: skipped, not installed ({', '.join(missing)}); see benchmarks/requirements.txt")
                continue
            minutes = args.minutes if name == "awa_bridge" or args.peer_minutes is None else args.peer_minutes
            await run_system(loader(), dbs, args, minutes, outcomes)
    finally:
        dbs.drop_all()


async def server_setting(url: str, name: str) -> str:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return str(await conn.fetchval("SELECT setting FROM pg_settings WHERE name = $1", name))
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    url, _embedded, where = bp.server(args.database_url)  # kept referenced: it stops with the process
    logging.getLogger("procrastinate").setLevel(logging.ERROR)
    outcomes: list[Outcome] = []
    notes: list[str] = []
    try:
        asyncio.run(run(args, url, outcomes, notes))
    except (KeyboardInterrupt, asyncio.CancelledError):
        say("interrupted: workers stopped, databases dropped")
        if any(o.intervals for o in outcomes):
            print(report(args, where, outcomes, [*notes, "interrupted: the last system's run is partial"]))
        return 130
    print(report(args, where, outcomes, notes))
    return 1 if any(o.error for o in outcomes) else 0  # a FAIL verdict is a finding, not an error


if __name__ == "__main__":
    sys.exit(main())
