"""One racer process for the cron double-fire test (``python -m tests.cron_race``).

Usage: ``python -m tests.cron_race URL START_EPOCH T0_ISO ROUNDS STEP_SECONDS CONNECTIONS``.
Opens CONNECTIONS asyncpg connections, waits until START_EPOCH (so the racing
processes start together), then on every connection concurrently runs the
leader's cron tick with the clock at T0 + k * STEP for k = 1..ROUNDS. Prints
one JSON line of what its ticks did.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import datetime, timedelta

import asyncpg

from awa_bridge.worker.maintenance.cron import fire_due_schedules


async def race(url: str, start: float, t0: datetime, rounds: int, step: float, connections: int) -> dict[str, int]:
    conns = [await asyncpg.connect(url, server_settings={"application_name": "cron-racer"}) for _ in range(connections)]
    stats = {"enqueued": 0, "skipped_locked": 0, "lost_race": 0, "errors": 0, "ticks": 0}

    async def racer(conn: asyncpg.Connection) -> None:
        for k in range(1, rounds + 1):
            tick = await fire_due_schedules(conn, now=t0 + timedelta(seconds=k * step))
            stats["enqueued"] += tick.count
            stats["skipped_locked"] += tick.skipped_locked
            stats["lost_race"] += tick.lost_race
            stats["errors"] += tick.errors
            stats["ticks"] += 1

    try:
        await asyncio.sleep(max(0.0, start - time.time()))
        await asyncio.gather(*(racer(conn) for conn in conns))
    finally:
        for conn in conns:
            await conn.close()
    return stats


def main(argv: list[str]) -> None:
    url, start, t0, rounds, step, connections = argv
    stats = asyncio.run(race(url, float(start), datetime.fromisoformat(t0), int(rounds), float(step), int(connections)))
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
