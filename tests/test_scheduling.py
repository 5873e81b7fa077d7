"""Rate limits, weighted concurrency and priority aging (issue 4 item 3)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

import awa_bridge
from awa_bridge.worker.config import QueueConfig
from awa_bridge.worker.scheduling import TokenBucket, overflow_shares, weighted_allowance

from .waiting import job_row, job_state, wait_until


@dataclass(eq=False)
class Load:
    name: str
    min_workers: int
    weight: int
    occupied: int = 0
    backlog: bool = False


def test_overflow_shares_use_every_slot_by_weight() -> None:
    a, b, c = Load("a", 0, 3), Load("b", 0, 1), Load("c", 0, 1)
    assert overflow_shares([a, b], 2) == {"a": 2, "b": 0}
    assert overflow_shares([a, b, c], 10) == {"a": 6, "b": 2, "c": 2}
    assert sum(overflow_shares([a, b, c], 7).values()) == 7


def test_weighted_allowance() -> None:
    a, b = Load("a", 1, 3, backlog=True), Load("b", 1, 1, backlog=True)
    assert weighted_allowance(a, [a, b], 4) == 3
    assert weighted_allowance(b, [a, b], 4) == 1
    b.occupied = 1
    assert weighted_allowance(b, [a, b], 4) == 0
    # Alone with work, a queue takes everything except the others' floors.
    a, b = Load("a", 1, 3, backlog=True), Load("b", 1, 1)
    assert weighted_allowance(a, [a, b], 4) == 3
    # The floor is guaranteed even when the others hold their whole share.
    a.occupied = 3
    assert weighted_allowance(b, [a, b], 4) == 1


def test_token_bucket() -> None:
    bucket = TokenBucket(rate=10, burst=3)
    assert bucket.available() == 3
    bucket.take(3)
    assert bucket.available() == 0
    assert 0 < bucket.seconds_until_token() <= 0.1


def test_bad_scheduling_settings_name_the_setting() -> None:
    cases = [
        ({"max_rate": 0}, "max_rate"),
        ({"max_rate": -5}, "max_rate"),
        ({"burst": 2}, "burst: needs max_rate"),
        ({"max_rate": 5, "burst": 0}, "burst"),
        ({"min_workers": 11}, "min_workers"),
        ({"weight": 0}, "weight"),
        ({"priority_aging": -1}, "priority_aging"),
    ]
    for kwargs, text in cases:
        with pytest.raises(awa_bridge.ValidationError, match=text):
            QueueConfig("q", **kwargs)
    with pytest.raises(awa_bridge.ValidationError, match="global_max_workers"):
        awa_bridge.worker.WorkerConfig(global_max_workers=0)


def insert_many(url: str, count: int, **opts: Any) -> None:
    with psycopg.connect(url) as conn:
        awa_bridge.insert_many_sync(conn, [{"i": i} for i in range(count)], **opts)
        conn.commit()


async def test_rate_limit_caps_claims(make_client, db_url: str) -> None:
    client = make_client()
    starts: list[float] = []

    @client.task("limited")
    async def limited(job):
        starts.append(time.monotonic())

    insert_many(db_url, 30, kind="limited", queue="rl")
    await client.start([QueueConfig("rl", max_workers=10, poll_interval=0.05, max_rate=20, burst=4)])
    await wait_until(lambda: len(starts) == 30, timeout=20)
    # The bucket holds 4 and refills 20 per second: no window of length w sees more than 4 + 20 w starts.
    for i, first in enumerate(starts):
        in_window = [t for t in starts[i:] if t - first <= 0.5]
        assert len(in_window) <= 4 + 20 * 0.5 + 1, len(in_window)
    assert starts[-1] - starts[0] >= (30 - 4) / 20 * 0.9


async def test_weighted_mode_shares_a_global_limit(make_client, db_url: str) -> None:
    client = make_client(global_max_workers=4)
    running = {"wa": 0, "wb": 0}
    peak_total = 0
    done = {"wa": 0, "wb": 0}
    b_done_when_a_reached_30: list[int] = []

    @client.task("weighted")
    async def weighted(job):
        nonlocal peak_total
        running[job.queue] += 1
        peak_total = max(peak_total, sum(running.values()))
        await asyncio.sleep(0.04)
        running[job.queue] -= 1
        done[job.queue] += 1
        if job.queue == "wa" and done["wa"] == 30:
            b_done_when_a_reached_30.append(done["wb"])

    insert_many(db_url, 60, kind="weighted", queue="wa")
    insert_many(db_url, 60, kind="weighted", queue="wb")
    await client.start(
        [
            QueueConfig("wa", max_workers=4, poll_interval=0.05, min_workers=1, weight=3),
            QueueConfig("wb", max_workers=4, poll_interval=0.05, min_workers=1, weight=1),
        ]
    )
    await wait_until(lambda: done["wa"] + done["wb"] == 120, timeout=30)
    assert peak_total <= 4, "the global limit holds"
    # wa gets 3 slots and wb 1 while both have work: when wa has done 30, wb has done about 10
    # (an equal split would give 30; wb may briefly hold 3 slots if it claims before wa has work).
    assert b_done_when_a_reached_30[0] <= 20, b_done_when_a_reached_30


async def _run_starvation(make_client, db_url: str, aging: float, window: float) -> tuple[int, str | None, int]:
    client = make_client()
    stop = asyncio.Event()

    @client.task("busy")
    async def busy(job):
        await asyncio.sleep(0.02)

    async def flood() -> None:
        # Keep a steady stream of priority-1 work ahead of the priority-4 job.
        with psycopg.connect(db_url, autocommit=True) as conn:
            while not stop.is_set():
                awa_bridge.insert_many_sync(conn, [{"n": 1}] * 5, kind="busy", queue="aged", priority=1)
                await asyncio.sleep(0.05)

    with psycopg.connect(db_url) as conn:
        awa_bridge.insert_many_sync(conn, [{"n": 0}] * 20, kind="busy", queue="aged", priority=1)
        low = awa_bridge.insert_job_sync(conn, {"low": True}, kind="busy", queue="aged", priority=4).id
        conn.commit()
    flooding = asyncio.create_task(flood())
    await client.start([QueueConfig("aged", max_workers=1, poll_interval=0.05, priority_aging=aging)])
    with contextlib.suppress(AssertionError):
        await wait_until(lambda: job_state(db_url, low) == "completed", timeout=window)
    stop.set()
    await flooding
    with psycopg.connect(db_url) as conn:
        waiting = conn.execute("SELECT count(*) FROM awa.jobs WHERE state = 'available'").fetchone()[0]
    return waiting, job_state(db_url, low), low


async def test_priority_aging_prevents_starvation(make_client, db_url: str) -> None:
    waiting, state, low = await _run_starvation(make_client, db_url, aging=0.2, window=15)
    assert state == "completed"
    assert waiting > 0, "the urgent stream was still flowing when the old job ran"
    row = job_row(db_url, low)
    assert row["priority"] == 1 and row["metadata"]["_awa_original_priority"] == 4


async def test_without_aging_the_stream_starves_the_low_priority_job(make_client, db_url: str) -> None:
    waiting, state, _ = await _run_starvation(make_client, db_url, aging=0, window=2)
    assert state == "available" and waiting > 0
