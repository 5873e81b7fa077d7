"""Pressure benchmark (R31): the queue under MVCC pressure and overload, and its recovery.

A producer at a steady rate (``--rate``, default 2,000 jobs/s) and one worker process, as in
``bench_soak.py`` (short retention, so finished rows are deleted as they age), through phases of
``--phase-seconds`` each (default 120):

- ``baseline``: the steady rate alone;
- ``idle-in-tx``: plus a transaction that took a transaction id and sits idle, so the server's
  MVCC horizon stops: no dead row version made from then on can be removed (the application
  bug of a session left open "idle in transaction");
- ``active-readers``: plus four ``REPEATABLE READ`` transactions, each holding one snapshot
  for the phase and re-reading the job table every second (reports, analytics);
- ``high-load``: the rate at ``--overload`` times (default 1.5x);

each pressure phase followed by a ``recovery`` phase at the steady rate with the pressure gone.
Then the producer stops, the backlog drains (``--drain-seconds`` at most) and the worker is asked
to stop. One line per ``--report-seconds`` (bench_soak's columns and the age of the oldest open
transaction), then a table per phase and the verdict:

- no job lost: every job produced was handled (the worker's own ledger of ids);
- the queue drained once the pressure was gone;
- the worker stopped cleanly (exit status 0 within 30 s);

and, as figures, how long after each pressure the handled rate was back at 90 % of the
baseline's with the backlog gone. ``--systems awa_bridge,pgqueuer`` puts the peers through the
same phases, one after the other, each on its own database at its defaults (the readers count
rows of the system's own tables). Exit status 1 when one of awa_bridge's invariants fails; a
peer's verdict is a finding, not an error.

    python benchmarks/bench_pressure.py --database-url postgresql://postgres@127.0.0.1:5432/postgres

Its databases are dropped at the end, also on Ctrl-C, SIGTERM or an error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_procs as bp
import bench_soak as bs
import bench_worker as bw

OLDEST_XACT_SQL = """
SELECT coalesce(max(extract(epoch FROM now() - xact_start)), 0)::float8
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
"""
READERS = 4


@dataclass
class Phase:
    name: str
    rate: float
    pressure: bool  # the phase adds a pressure (the next recovery measures the way back)
    intervals: list[tuple[bs.Interval, float]] = field(default_factory=list)  # (period, oldest xact s)


class Pressure:
    """What a phase adds beside the producer: held transactions on their own connections."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conns: list[Any] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def idle_in_transaction(self) -> None:
        import asyncpg

        conn = await asyncpg.connect(self.url)
        self.conns.append(conn)
        await conn.execute("BEGIN")
        await conn.fetchval("SELECT txid_current()")  # now it holds an XID: the horizon stops here

    async def readers(self, query: str, count: int = READERS) -> None:
        import asyncpg

        async def read(conn: Any) -> None:
            while True:
                await conn.fetch(query)
                await asyncio.sleep(1)

        for _ in range(count):
            conn = await asyncpg.connect(self.url)
            self.conns.append(conn)
            await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            self.tasks.append(asyncio.create_task(read(conn)))

    async def release(self) -> None:
        for task in self.tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for conn in self.conns:
            with contextlib.suppress(Exception):
                await conn.close()  # the open transaction ends with its session
        self.tasks, self.conns = [], []


def phases(args: argparse.Namespace) -> list[Phase]:
    rate = args.rate
    return [
        Phase("baseline", rate, False),
        Phase("idle-in-tx", rate, True),
        Phase("recovery", rate, False),
        Phase("active-readers", rate, True),
        Phase("recovery", rate, False),
        Phase("high-load", rate * args.overload, True),
        Phase("recovery", rate, False),
    ]


async def start_pressure(phase: Phase, pressure: Pressure, system: bs.SoakSystem) -> None:
    if phase.name == "idle-in-tx":
        await pressure.idle_in_transaction()
    elif phase.name == "active-readers":
        await pressure.readers(system.rows_sql)  # a count over the system's job tables


async def run_phase(session: bs.Session, meter: bs.Meter, phase: Phase, args: argparse.Namespace) -> None:
    assert session.producer is not None
    session.producer.set_rate(phase.rate)
    periods = max(1, round(args.phase_seconds / args.report_seconds))
    start = time.perf_counter()
    for k in range(1, periods + 1):
        target = start + k * args.report_seconds
        while time.perf_counter() < target:
            session.check_producer()
            await asyncio.sleep(min(0.5, max(0.0, target - time.perf_counter())))
        iv = await meter.read()
        oldest = max(0.0, float(await session.conn.fetchval(OLDEST_XACT_SQL)))
        phase.intervals.append((iv, oldest))
        bs.say(f"{bs.interval_line(iv)} {oldest:,.0f} | {phase.name} |")


def back_after(phase: Phase, baseline: Phase, report_seconds: float) -> float | None:
    """Seconds into a recovery until a period handled 90 % of the baseline's rate with the backlog gone."""
    base_rate = statistics.median(iv.rate for iv, _ in baseline.intervals)
    base_live = max(iv.live for iv, _ in baseline.intervals)
    for k, (iv, _) in enumerate(phase.intervals, start=1):
        if iv.rate >= 0.9 * base_rate and iv.live <= max(2 * base_live, 200):
            return k * report_seconds
    return None


def phase_table(done: list[Phase], report_seconds: float) -> list[str]:
    lines = [
        "| phase | offered/s | handled/s | p95 ms, median of periods / max | live rows, max | dead tuples, max "
        "| tables MB, max | oldest transaction s, max | back to 90 % of baseline |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    baseline = done[0]
    for i, phase in enumerate(done):
        ivs = [iv for iv, _ in phase.intervals]
        if not ivs:
            continue
        p95s = [iv.p95 for iv in ivs if iv.p95 is not None]
        back = "-"
        if phase.name == "recovery" and i > 0 and done[i - 1].pressure:
            seconds = back_after(phase, baseline, report_seconds)
            back = f"after {seconds:g} s" if seconds is not None else "not in the phase"
        lines.append(
            f"| {phase.name} | {statistics.median(iv.produced_rate for iv in ivs):,.0f} "
            f"| {statistics.median(iv.rate for iv in ivs):,.0f} "
            f"| {bs.ms(statistics.median(p95s) if p95s else None)} / {bs.ms(max(p95s) if p95s else None)} "
            f"| {max(iv.live for iv in ivs):,} "
            f"| {max(iv.dead for iv in ivs):,} | {bs.mb(max(iv.size for iv in ivs))} "
            f"| {max(o for _, o in phase.intervals):,.0f} | {back} |"
        )
    return lines


async def drain(session: bs.Session, seconds: float) -> bool:
    """Stop producing and wait for every job to finish; True when none is left in time."""
    assert session.producer is not None
    session.producer.set_rate(0)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if await bs.live_rows(session) == 0:
            return True
        await asyncio.sleep(0.2)
    return False


async def run_system(system: bs.SoakSystem, dbs: bw.Databases, args: argparse.Namespace) -> tuple[list[str], bool]:
    """One system through the phases, the drain and the stop: its report lines, and whether every invariant held."""
    name = dbs.template(system.name)
    url = dbs.url(name)
    session = bs.Session(system, url, args, ledger=True)
    pressure = Pressure(url)
    done: list[Phase] = []
    try:
        await system.install(url)
        meter = await session.open(args.rate)
        await meter.reset()
        meter.t0 = meter.last_t
        bs.say(f"\n{system.name}:")
        bs.say(bs.HEADER + " oldest xact s | phase |")
        for phase in phases(args):
            done.append(phase)
            await start_pressure(phase, pressure, system)
            try:
                await run_phase(session, meter, phase, args)
            finally:
                await pressure.release()
        drained = await drain(session, args.drain_seconds)
        assert session.producer is not None
        produced = session.producer.sent
        session.producer.stop()
        worker = session.workers[0]
        stopped = True
        try:
            await worker.stop(timeout=30)
        except Exception:
            stopped = False
        assert worker.proc is not None
        stopped = stopped and worker.proc.returncode == 0
        handled = set(worker.ids())
        lost = produced - len(handled)
        lines = [f"### {system.name}", "", *phase_table(done, args.report_seconds), ""]
        lines += [
            f"- no job lost: {'yes' if lost == 0 else f'NO, {lost:,} of {produced:,} never handled'} "
            f"({produced:,} produced, {len(handled):,} handled)",
            f"- drained after the pressure: {'yes' if drained else f'NO, jobs left after {args.drain_seconds:g} s'}",
            f"- worker stopped cleanly: {'yes' if stopped else f'NO (exit status {worker.proc.returncode})'}",
            "",
        ]
        return lines, lost == 0 and drained and stopped
    finally:
        await pressure.release()
        await session.close()
        dbs.drop(name)


async def run(args: argparse.Namespace, server_url: str, report: list[str]) -> bool:
    """Each system in turn; fills ``report``; True when awa_bridge's invariants held (a peer's are findings)."""
    dbs = bw.Databases(server_url)
    ok = True
    try:
        for name in args.systems:
            modules, loader = bs.LOADERS[name]
            missing = [m for m in modules if not bw._available(m)]
            if missing:
                report.append(f"- {name}: skipped, not installed ({', '.join(missing)}): benchmarks/requirements.txt")
                continue
            lines, held = await run_system(loader(), dbs, args)
            report += lines
            ok = ok and (held or name != "awa_bridge")
    finally:
        dbs.drop_all()
    return ok


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--database-url", default=os.environ.get("DATABASE_URL"), help="server to use (default: an embedded one)"
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=2000.0,
        help="jobs/s the producer offers (default 2000); give the highest rate bench_soak.py --find-max "
        "sustains for the high-load phase to overload the worker",
    )
    parser.add_argument("--overload", type=float, default=1.5, help="the high-load phase's rate, x --rate (1.5)")
    parser.add_argument("--phase-seconds", type=float, default=120.0, help="length of each phase (default 120)")
    parser.add_argument("--report-seconds", type=float, default=10.0, help="one line per this many seconds (10)")
    parser.add_argument("--drain-seconds", type=float, default=300.0, help="most the final drain may take (300)")
    parser.add_argument("--retention", type=float, default=60.0, help="completed_retention in seconds (default 60)")
    parser.add_argument("--concurrency", type=int, default=100, help="handlers in the worker (default 100)")
    parser.add_argument(
        "--systems",
        type=lambda s: s.split(","),
        default=["awa_bridge"],
        help=f"comma-separated, run one after the other: {','.join(bs.SYSTEMS)} (default awa_bridge)",
    )
    args = parser.parse_args(argv)
    for name in args.systems:
        if name not in bs.SYSTEMS:
            parser.error(f"--systems: unknown system {name!r} (choose from {', '.join(bs.SYSTEMS)})")
    if args.rate <= 0 or args.overload <= 0 or args.phase_seconds <= 0 or args.report_seconds <= 0:
        parser.error("--rate, --overload, --phase-seconds and --report-seconds must be positive")
    if args.report_seconds > args.phase_seconds:
        parser.error("--report-seconds must not exceed --phase-seconds")
    # What bench_soak.Session reads.
    args.processes, args.bridge_config = 1, "{}"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    url, _embedded, where = bp.server(args.database_url)  # kept referenced: it stops with the process
    report = [
        "## awa_bridge under pressure (R31)",
        "",
        f"- {where}, autovacuum {asyncio.run(bs.server_setting(url, 'autovacuum'))}; {os.cpu_count()} CPUs",
        f"- {args.rate:,.0f} jobs/s, phases of {args.phase_seconds:g} s, high load {args.overload:g}x, "
        f"awa_bridge's retention {args.retention:g} s, concurrency {args.concurrency}; the peers at their defaults",
        "",
    ]
    ok = asyncio.run(run(args, url, report))  # Ctrl-C and SIGTERM: see bp.run_main
    print("\n".join(report))
    return 0 if ok else 1


if __name__ == "__main__":
    bp.run_main(main)
