"""Keyset paging for the job list: newer / older / oldest pages without OFFSET and without a count.

Django's paginator walks pages with ``OFFSET``, which on millions of rows
grows slower with every page, and under an estimated count its last page
numbers do not even exist, so the oldest rows of a filtered list could not
be reached. The job list therefore also pages by id (its default order is
newest first): *Older* shows the ``per_page`` jobs below the last id on the
page, *Newer* those above the first, *Oldest* the first ``per_page`` ever
inserted that match the filters. Each is one index range scan, however deep.
The keyset parameters are taken out of the request before Django's
ChangeList sees them (it would treat them as unknown field lookups).
"""

from __future__ import annotations

from typing import Any

from django.db.models import BigIntegerField, ExpressionWrapper, F
from django.http import HttpRequest

KEYSET_PARAMS = ("before", "after", "oldest")


def take_keyset(request: HttpRequest) -> None:
    """Move ``before`` / ``after`` / ``oldest`` from ``request.GET`` to ``request.awa_keyset``."""
    keyset: dict[str, int] = {}
    if any(key in request.GET for key in KEYSET_PARAMS):
        params = request.GET.copy()
        for key in KEYSET_PARAMS:
            value = params.pop(key, None)
            if value and (value[-1].isdigit() or key == "oldest"):
                keyset[key] = int(value[-1]) if value[-1].isdigit() else 1
        request.GET = params  # type: ignore[assignment]
    request.awa_keyset = keyset  # type: ignore[attr-defined]


def keyset_page(request: HttpRequest, queryset: Any, per_page: int) -> Any:
    """``queryset`` (already filtered) restricted to the keyset page the request asks for.

    Each page is first narrowed to an id range (the ``per_page``-th id beyond the
    bound, found by ``_nth_id``), so the list query is a short range scan.
    """
    keyset: dict[str, int] = getattr(request, "awa_keyset", {})
    if "before" in keyset:
        older = queryset.filter(id__lt=keyset["before"])
        bound = _nth_id(older, per_page, descending=True)
        return older if bound is None else older.filter(id__gte=bound)
    if "after" in keyset or "oldest" in keyset:
        newer = queryset.filter(id__gt=keyset["after"]) if "after" in keyset else queryset
        bound = _nth_id(newer, per_page, descending=False)
        return newer if bound is None else newer.filter(id__lte=bound)
    return queryset


#: Below this many estimated matching rows, the ids are collected through the filter's own
#: index and sorted (a top-N sort), not by walking ``jobs_pkey`` in order: a rare filter's rows
#: can sit at the far end of a million ids.
SPARSE_BELOW = 50_000


def _nth_id(queryset: Any, n: int, *, descending: bool) -> int | None:
    """The ``n``-th id of ``queryset`` in id order (None when it has fewer rows)."""
    from .admin import _planner_estimate

    estimate = _planner_estimate(queryset)
    key: Any = F("id")
    if estimate is not None and estimate < SPARSE_BELOW:
        key = ExpressionWrapper(F("id") + 0, output_field=BigIntegerField())  # not an index order
    ordered = queryset.order_by(key.desc() if descending else key.asc())
    found = list(ordered.values_list("id", flat=True)[n - 1 : n])
    return int(found[0]) if found else None


def pager(request: HttpRequest, cl: Any) -> dict[str, Any]:
    """Links and wording of the job list's footer: honest count, newest / newer / older / oldest."""
    paginator = cl.paginator
    estimated = bool(getattr(paginator, "estimated", False))
    count = cl.result_count
    keyset: dict[str, int] = getattr(request, "awa_keyset", {})
    rows = list(cl.result_list)
    by_id = "o" not in request.GET  # the default order, newest first: ids are the keyset
    links: dict[str, str] = {}
    if by_id and rows:
        ids = [row.id for row in rows]
        clean = ["p", *KEYSET_PARAMS]
        if keyset:
            links["newest"] = cl.get_query_string(remove=clean)
            links["newer"] = cl.get_query_string({"after": max(ids)}, remove=clean)
        if len(rows) >= cl.list_per_page or (keyset.get("oldest") is None and count > len(rows)):
            links["older"] = cl.get_query_string({"before": min(ids)}, remove=clean)
        if "oldest" not in keyset and count > len(rows):
            links["oldest"] = cl.get_query_string({"oldest": 1}, remove=clean)
    if keyset.get("oldest") is not None:
        links.pop("older", None)
    return {
        "count": f"about {_round(count):,}" if estimated else f"{count:,}",
        "estimated": estimated,
        "scope": "from here on" if keyset else "",
        "links": links,
        "keyset": bool(keyset),
    }


def _round(count: int) -> int:
    """An estimate to three significant figures: 25,817 → 25,800."""
    if count < 1000:
        return count
    scale = 10 ** (len(str(count)) - 3)
    return int(round(count / scale) * scale)
