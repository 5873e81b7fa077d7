"""Instructions a worker process executes per drained job, counted by valgrind: figures a busy machine cannot skew.

A drain's wall-clock rate on a 2-core machine moves with whatever else the
host runs; the instructions the worker process executes per job do not. For
each case this script enqueues ``--small`` and then ``--large`` no-op jobs in
a throwaway database and runs one worker process under ``valgrind
--tool=callgrind`` until it has handled them (bench_procs.py's workers, the
ones the soak and scale benchmarks run, with awa_bridge's garbage collector
tuned as ``Client.run`` tunes it). The difference of the two totals divided by
the difference of the job counts is the cost of one job, start-up excluded.
It counts the worker process only (the interpreter, the driver, the event
loop, the system-call entry), not PostgreSQL's side. Beside the workers, the
client side of bench_scale.py's SQL-only claim + complete loop: batches of
claims and completions with no Python per job, the floor.

    python benchmarks/count_drain_instructions.py --database-url postgresql://postgres@127.0.0.1:5432/postgres

awa_bridge's worker runs without its maintenance thread (``maintenance``
off): its work comes per second, not per job, and a worker under valgrind runs
about fifty times slower than without. Run the script with
``PYTHONPATH=/path/to/other/checkout`` to count another version of
awa_bridge. Needs valgrind; pgqueuer is counted when installed
(requirements.txt).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
from typing import Any

import psycopg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_procs as bp
import bench_worker as bw
from count_enqueue_instructions import callgrind, check_sizes, throwaway_database

from awa_bridge.worker.config import DEFAULT_CLAIM_BATCH

SQL_ONLY = "SQL-only loop"
CONCURRENCY = 500  # bench_scale.py's default


async def drain(case: str, url: str, jobs: int, bridge_config: dict[str, Any]) -> None:
    """The child's work: one worker (or the SQL-only loop) handles the ``jobs`` queued jobs, then stops."""
    if case == SQL_ONLY:
        import bench_scale

        await bench_scale.sql_limit(url, jobs, 1, DEFAULT_CLAIM_BATCH)
        return
    rec = bp.Recorder(keep_ids=False)
    start, stop = bp.make_worker(case, url, CONCURRENCY, rec, {**bridge_config, "maintenance": False})
    if case == "awa_bridge":
        from awa_bridge.worker import tune_gc

        tune_gc()
    await start()
    while rec.handled < jobs:
        await asyncio.sleep(0.05)
    await stop()
    if rec.handled != jobs:
        raise RuntimeError(f"{case} handled {rec.handled} jobs, {jobs} were queued")


def instructions(url: str, case: str, system: bw.System, jobs: int, bridge_config: str) -> int:
    asyncio.run(system.enqueue_bulk(url, jobs))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")
    child = [sys.executable, __file__, "--child", case, "--jobs", str(jobs), "--database-url", url]
    child += ["--bridge-config", bridge_config]
    return callgrind(child, case)[0]


def count(args: argparse.Namespace, url: str) -> None:
    """Print the table for a throwaway database at ``url``."""
    import awa_bridge

    bridge = bw.bridge_system()
    cases = [(SQL_ONLY, bridge), ("awa_bridge", bridge)]
    if bw._available("pgqueuer"):
        cases.append(("pgqueuer", bw.pgqueuer_system()))
    cases = [(name, system) for name, system in cases if not args.only or name in args.only.split(",")]
    for system in {id(system): system for _, system in cases}.values():
        asyncio.run(system.install(url))
    config = json.loads(args.bridge_config)
    print(f"awa_bridge from {os.path.dirname(awa_bridge.__file__)}; {args.small:,} and {args.large:,} jobs per case")
    print()
    print("| worker process (no-op jobs) | instructions per job | x the SQL-only loop |")
    print("|---|---:|---:|")
    floor = None
    for name, system in cases:
        large, small = (instructions(url, name, system, n, args.bridge_config) for n in (args.large, args.small))
        per_job = (large - small) // (args.large - args.small)
        if name == SQL_ONLY:
            floor = per_job
        label = f"{name} {bw._version(name)}" if name == "pgqueuer" else name
        if name != SQL_ONLY:
            label += f" ({bp.loop_names([name], config).split()[-1]})"
        print(f"| {label} | {per_job:,} | {per_job / floor:.1f} |" if floor else f"| {label} | {per_job:,} | - |")
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL"), help="a server to work beside")
    parser.add_argument("--small", type=int, default=2_000)
    parser.add_argument("--large", type=int, default=10_000)
    parser.add_argument("--only", default="", help=f"comma-separated cases: awa_bridge, {SQL_ONLY}, pgqueuer")
    parser.add_argument(
        "--bridge-config",
        default="{}",
        metavar="JSON",
        help='awa_bridge WorkerConfig overrides, e.g. \'{"event_loop": "uvloop"}\' (each worker runs on the loop '
        "its own CLI would: awa_bridge on asyncio's by default, pgqueuer on uvloop where installed)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.database_url:
        parser.error("--database-url (or DATABASE_URL) is required")
    if args.child:
        config = json.loads(args.bridge_config)
        bp.run_on_its_loop(args.child, drain(args.child, args.database_url, args.jobs, config), config)
        return
    check_sizes(parser, args)
    bp.check_server(args.database_url)
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed")
    with throwaway_database(args.database_url, f"awa_countdrain_{os.getpid()}") as url:
        count(args, url)


if __name__ == "__main__":
    bp.run_main(main, "interrupted: valgrind stopped, database dropped")
