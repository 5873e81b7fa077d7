"""Throughput charts as inline SVG: stacked bars per bucket (completed, retried, failed), no library, no CDN."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from awa_bridge.dashboard import Throughput

COLORS = {"completed": "#15803d", "retried": "#c2410c", "failed": "#b91c1c"}
HEIGHT = 80
WIDTH = 360


def throughput_svg(series: Throughput | None, buckets: list[datetime], window: str) -> SafeString:
    """One queue's chart over ``buckets``; an empty series draws an empty axis (nothing happened)."""
    count = len(buckets)
    zeros = [0] * count
    completed = series.completed if series else zeros
    retried = series.retried if series else zeros
    failed = series.failed if series else zeros
    peak = max([c + r + f for c, r, f in zip(completed, retried, failed, strict=True)] + [1])
    slot = WIDTH / count
    bar = max(slot - 1, 1)
    label = "%H:%M" if window == "hour" else "%d %H:00"
    bars = []
    for i, when in enumerate(buckets):
        base = float(HEIGHT)
        local = timezone.localtime(when).strftime(label)
        tip = f"{local}: {completed[i]} completed, {retried[i]} retried, {failed[i]} failed"
        for name, values in (("completed", completed), ("retried", retried), ("failed", failed)):
            if values[i]:
                height = values[i] / peak * (HEIGHT - 4)
                base -= height
                bars.append((f"{i * slot:.1f}", f"{base:.1f}", f"{bar:.1f}", f"{height:.1f}", COLORS[name], tip))
    start = timezone.localtime(buckets[0]).strftime(label)
    end = timezone.localtime(buckets[-1]).strftime(label)
    summary = f"{sum(completed)} completed, {sum(retried)} retried, {sum(failed)} failed"
    return format_html(
        '<svg class="awa-chart" data-window="{}" role="img" aria-label="{}" width="{}" height="{}" '
        'viewBox="0 0 {} {}" xmlns="http://www.w3.org/2000/svg">'
        '<line x1="0" y1="{}" x2="{}" y2="{}" stroke="#999" stroke-width="1"/>{}'
        '<text x="2" y="10" font-size="9" fill="#666">{}</text>'
        '<text x="2" y="{}" font-size="9" fill="#666">{}</text>'
        '<text x="{}" y="{}" font-size="9" fill="#666" text-anchor="end">{}</text></svg>',
        window,
        summary,
        WIDTH,
        HEIGHT + 14,
        WIDTH,
        HEIGHT + 14,
        HEIGHT,
        WIDTH,
        HEIGHT,
        format_html_join(
            "",
            '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}</title></rect>',
            bars,
        ),
        f"max {peak}/{'min' if window == 'hour' else 'h'}",
        HEIGHT + 12,
        start,
        WIDTH,
        HEIGHT + 12,
        end,
    )
