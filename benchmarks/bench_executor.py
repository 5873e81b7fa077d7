"""Short sync jobs per second: the thread executor vs the process executor.

    .venv/bin/python benchmarks/bench_executor.py --database-url postgresql://postgres@127.0.0.1:5432/postgres

Creates a throwaway database beside the one given (dropped at the end),
enqueues ``--jobs`` no-op sync jobs per run and times one in-process worker
draining them (after a warm-up batch, so the process executor's children
are up), for each executor and concurrency, best of ``--rounds``. The
process executor pays a pipe round trip and pickling per attempt; what it
buys is a handler that can be killed at its deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import bench_procs as bp
import psycopg

import awa_bridge
from awa_bridge.worker import Client, QueueConfig


def noop(job: Any) -> None:
    """The benchmark's handler: a plain sync function (the process executor imports it by name)."""


def with_dbname(url: str, dbname: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{dbname}"))


def enqueue(url: str, queue: str, count: int) -> None:
    with psycopg.connect(url) as conn:
        awa_bridge.insert_many_sync(conn, [{"n": i} for i in range(count)], kind="noop", queue=queue)
        conn.commit()


def remaining(url: str, queue: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM awa.jobs WHERE queue = %s AND state <> 'completed'", (queue,))
        return int(row.fetchone()[0])  # type: ignore[index]


async def drain(url: str, executor: str, concurrency: int, jobs: int) -> float:
    """Jobs/s of one drain of ``jobs`` no-op sync jobs, after a warm-up batch (children started)."""
    queue = f"bench_{executor}_{uuid.uuid4().hex[:6]}"
    client = Client(url, maintenance=False)
    client.task("noop", queue=queue)(noop)
    await client.start([QueueConfig(queue, max_workers=concurrency, executor=executor)])
    try:
        await asyncio.to_thread(enqueue, url, queue, concurrency * 4)
        while await asyncio.to_thread(remaining, url, queue):
            await asyncio.sleep(0.02)
        await asyncio.to_thread(enqueue, url, queue, jobs)
        started = time.perf_counter()
        while await asyncio.to_thread(remaining, url, queue):
            await asyncio.sleep(0.02)
        return jobs / (time.perf_counter() - started)
    finally:
        await client.shutdown()


async def run(args: argparse.Namespace, url: str) -> dict[tuple[str, int], float]:
    best: dict[tuple[str, int], float] = {}
    for _ in range(args.rounds):
        for concurrency in args.concurrency:
            for executor in ("thread", "process"):
                rate = await drain(url, executor, concurrency, args.jobs)
                key = (executor, concurrency)
                best[key] = max(best.get(key, 0.0), rate)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL"), help="server to use")
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per drain (default 2000)")
    parser.add_argument("--rounds", type=int, default=3, help="best of N rounds (default 3)")
    parser.add_argument(
        "--concurrency",
        type=lambda v: [int(c) for c in v.split(",")],
        default=[4, 16],
        help="comma-separated max_workers (default 4,16)",
    )
    args = parser.parse_args()
    if not args.database_url:
        parser.error("give --database-url or set DATABASE_URL")
    bp.require_positive(parser, args, "--jobs", "--rounds")
    if min(args.concurrency) < 1:
        parser.error("--concurrency values must be at least 1")
    bp.check_server(args.database_url)
    name = f"awa_bench_executor_{os.getpid()}"
    url = with_dbname(args.database_url, name)
    try:
        with psycopg.connect(args.database_url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        awa_bridge.migrate(url)
        best = asyncio.run(run(args, url))
    finally:
        with psycopg.connect(args.database_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"# Short sync jobs: {args.jobs} no-op jobs per drain, best of {args.rounds}, {os.cpu_count()} CPUs\n")
    print("| max_workers | thread jobs/s | process jobs/s | process / thread |")
    print("|---:|---:|---:|---:|")
    for concurrency in args.concurrency:
        thread, process = best[("thread", concurrency)], best[("process", concurrency)]
        print(f"| {concurrency} | {thread:,.0f} | {process:,.0f} | {process / thread:.2f} |")


if __name__ == "__main__":
    bp.run_main(main, "interrupted: workers stopped, database dropped")
