"""How the awa admin pages show times and durations: one date format, relative times, humanized spans."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

#: One date format everywhere in the admin pages of awa_django.
DATE_FORMAT = "%Y-%m-%d %H:%M:%S %Z"


def show_time(value: datetime | None, zone: str | None = None, *, browser: bool = False) -> str:
    """``value`` in one format, in ``zone`` (default: the viewer's Django timezone), with a relative hint.

    The ``<time>`` element carries the instant; with ``browser=True`` the
    page's script also shows it in the browser's own timezone.
    """
    if value is None:
        return "-"
    tz = ZoneInfo(zone) if zone else timezone.get_current_timezone()
    local = value.astimezone(tz)
    return format_html(
        '<time datetime="{}" title="{}"{}>{}</time> <span class="awa-relative">({})</span>',
        value.isoformat(),
        value.astimezone(ZoneInfo("UTC")).strftime(DATE_FORMAT),
        mark_safe(" data-awa-local") if browser else "",
        local.strftime(DATE_FORMAT),
        relative(value),
    )


def relative(value: datetime, now: datetime | None = None) -> str:
    """``in 3 h 5 min`` / ``12 s ago``: two units at most."""
    seconds = (value - (now or timezone.now())).total_seconds()
    text = humanize_seconds(abs(seconds))
    return f"in {text}" if seconds > 0 else f"{text} ago"


def humanize_seconds(seconds: float) -> str:
    """``273602`` → ``3 d 4 h``; ``75`` → ``1 min 15 s``; ``0.4`` → ``0.4 s``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    units = (("d", 86400), ("h", 3600), ("min", 60), ("s", 1))
    parts: list[str] = []
    remaining = int(seconds)
    for name, size in units:
        if remaining >= size or (parts and len(parts) < 2):
            count, remaining = divmod(remaining, size)
            if count or parts:
                parts.append(f"{count} {name}")
        if len(parts) == 2:
            break
    return " ".join(p for p in parts if not p.startswith("0 ")) or "0 s"


def truncated(value: str, width: int = 40) -> str:
    """``value`` cut to ``width`` characters with an ellipsis, the whole of it in the tooltip."""
    if len(value) <= width:
        return format_html('<span class="awa-trunc">{}</span>', value)
    return format_html('<span class="awa-trunc" title="{}">{}…</span>', value, value[: width - 1])


def show_when(value: datetime | None) -> str:
    """The compact form for list columns: the relative time, the full date (one format) on hover."""
    if value is None:
        return "-"
    local = value.astimezone(timezone.get_current_timezone())
    return format_html(
        '<time datetime="{}" title="{}">{}</time>', value.isoformat(), local.strftime(DATE_FORMAT), relative(value)
    )
