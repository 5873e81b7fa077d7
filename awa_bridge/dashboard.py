"""What the operations dashboard reads: throughput from the rollups, oldest waiting jobs, live workers.

Read-only and cheap on big tables: throughput comes from ``awa.queue_rollups``
(kept by the workers, ``awa_bridge.worker.rollup``), never from ``awa.jobs``;
the oldest waiting job per queue is 4 index probes; the workers come from
``awa.runtime_instances``. Each function takes a URL or a sync connection
(psycopg, SQLAlchemy, Django), like ``awa_bridge.admin``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .drivers.connect import sync_driver_for
from .sql import QUERIES

__all__ = ["Throughput", "WorkerInfo", "buckets", "has_relation", "oldest_waiting", "throughput", "workers"]

#: The two chart windows: (rollup unit, buckets, bucket length).
WINDOWS = {"hour": ("minute", 60, timedelta(minutes=1)), "day": ("hour", 24, timedelta(hours=1))}


@dataclass(frozen=True)
class Throughput:
    """One queue's outcomes per bucket over a window, oldest bucket first, zeros included."""

    queue: str
    window: str  # "hour" (per minute) or "day" (per hour)
    buckets: list[datetime]
    completed: list[int]
    failed: list[int]
    retried: list[int]
    cancelled: list[int]

    @property
    def total_completed(self) -> int:
        return sum(self.completed)


@dataclass(frozen=True)
class WorkerInfo:
    """A worker process as it registered itself; ``live`` is False past the staleness window (gone)."""

    instance_id: str
    hostname: str
    pid: int
    version: str
    queues: list[dict[str, Any]]  # [{"name", "max_workers", "running"}]
    jobs_held: int
    is_leader: bool
    started_at: datetime
    heartbeat_at: datetime
    live: bool
    db_now: datetime


def _fetch(conn_or_url: Any, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    with sync_driver_for(conn_or_url) as driver:
        return driver.fetch_all(QUERIES[query], params)


def has_relation(conn_or_url: Any, name: str) -> bool:
    """Whether ``name`` (``awa.queue_rollups`` ...) exists: a database the real Awa migrated has
    the shared tables but none of this package's bookkeeping, and the dashboard then shows less
    instead of failing."""
    rows = _fetch(conn_or_url, "relation_exists", {"name": name})
    return bool(rows and rows[0]["present"])


def buckets(window: str, now: datetime) -> list[datetime]:
    """The bucket starts of ``window`` ending with the one ``now`` falls in, oldest first."""
    unit, count, step = WINDOWS[window]
    end = now.replace(second=0, microsecond=0) if unit == "minute" else now.replace(minute=0, second=0, microsecond=0)
    return [end - step * (count - 1 - i) for i in range(count)]


def throughput(conn_or_url: Any, window: str, now: datetime) -> dict[str, Throughput]:
    """Per queue, the last hour per minute (``window="hour"``) or the last day per hour (``"day"``)."""
    unit, count, _ = WINDOWS[window]
    starts = buckets(window, now)
    rows = _fetch(conn_or_url, "queue_throughput", {"unit": unit, "since": starts[0]})
    series: dict[str, dict[str, list[int]]] = {}
    index = {bucket: i for i, bucket in enumerate(starts)}
    for row in rows:
        position = index.get(row["bucket"])
        if position is None:
            continue
        columns = series.setdefault(
            row["queue"], {c: [0] * count for c in ("completed", "failed", "retried", "cancelled")}
        )
        for column, values in columns.items():
            values[position] = int(row[column])
    return {queue: Throughput(queue, window, starts, **columns) for queue, columns in series.items()}


def oldest_waiting(conn_or_url: Any, queues: list[str]) -> dict[str, datetime]:
    """Per queue, when its longest-due available job was enqueued (queues with none are absent)."""
    rows = _fetch(conn_or_url, "queue_oldest_waiting", {"queues": queues})
    return {row["queue"]: row["oldest_created_at"] for row in rows if row["oldest_created_at"] is not None}


def workers(conn_or_url: Any, staleness: float) -> list[WorkerInfo]:
    """Every registered worker process; those silent for more than ``staleness`` seconds have ``live=False``."""
    rows = _fetch(conn_or_url, "list_runtime_instances", {"staleness": float(staleness)})
    result = []
    for row in rows:
        queues = json.loads(row["queues"]) if isinstance(row["queues"], str) else row["queues"]
        result.append(WorkerInfo(**{**row, "queues": list(queues or [])}))
    return result
