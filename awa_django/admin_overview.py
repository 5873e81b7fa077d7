"""The queues overview: one row per queue with its charts, depth by state, lag and who serves it.

Everything here is index probes or rollup rows (see ``awa_bridge.dashboard``):
the page stays fast with millions of finished jobs. "Served" means at least one
worker whose heartbeat is within the staleness window lists the queue; a
queue nobody serves says so instead of looking healthy.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from awa_bridge import admin as ops
from awa_bridge import dashboard

from .charts import throughput_svg
from .conf import get_settings
from .display import humanize_seconds, show_time


def staleness() -> float:
    """The heartbeat staleness window of the workers (``AWA['WORKER']``), in seconds."""
    return float(get_settings().worker.heartbeat_staleness)


def overview_rows(conn: Any) -> list[dict[str, Any]]:
    now = timezone.now()
    stats = {s.queue: s for s in ops.queue_stats(conn)}
    charts = dashboard.has_relation(conn, "awa.queue_rollups")
    registry = dashboard.has_relation(conn, "awa.runtime_instances")
    hour = dashboard.throughput(conn, "hour", now) if charts else {}
    day = dashboard.throughput(conn, "day", now) if charts else {}
    live = [w for w in dashboard.workers(conn, staleness()) if w.live] if registry else []
    names = sorted(set(stats) | set(hour) | set(day) | {q["name"] for w in live for q in w.queues})
    oldest = dashboard.oldest_waiting(conn, names)
    hour_buckets, day_buckets = dashboard.buckets("hour", now), dashboard.buckets("day", now)
    rows = []
    for name in names:
        stat = stats.get(name)
        serving = [q for w in live for q in w.queues if q.get("name") == name]
        hour_series, day_series = hour.get(name), day.get(name)
        rows.append(
            {
                "queue": name,
                "stats": stat,
                "lag": humanize_seconds(stat.lag_seconds) if stat and stat.lag_seconds is not None else "-",
                "oldest": show_time(oldest[name]) if name in oldest else "-",
                "registry": registry,
                "workers": len(serving),
                "running": sum(int(q.get("running", 0)) for q in serving),
                "slots": sum(int(q.get("max_workers", 0)) for q in serving),
                "paused": bool(stat and stat.paused),
                "hour_chart": throughput_svg(hour_series, hour_buckets, "hour"),
                "day_chart": throughput_svg(day_series, day_buckets, "day"),
                "hour_completed": sum(hour_series.completed) if hour_series else 0,
                "hour_failed": sum(hour_series.failed) if hour_series else 0,
                "hour_retried": sum(hour_series.retried) if hour_series else 0,
            }
        )
    return rows
