"""The job list and detail page: columns, truncation, honest counts, keyset paging to the oldest
rows, kind search by substring through the index, the timeline and user-first tracebacks."""

from __future__ import annotations

import html
import os
import re
import socket
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from awa_bridge import admin as ops
from awa_django.admin import EstimatedCountPaginator
from awa_django.admin_paging import _round

from .conftest import job_state, running_worker, wait_for
from .test_admin_operations import _jobs
from .test_admin_views import results
from .testapp import tasks

pytestmark = [pytest.mark.django, pytest.mark.django_db(transaction=True)]
CHANGELIST = "admin:awa_django_job_changelist"

TRACEBACK = """Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/awa_bridge/worker/executor.py", line 88, in run
    result = await handler(ctx)
  File "/srv/shop/billing/tasks.py", line 42, in charge_card
    gateway.charge(order.total)
  File "/venv/lib/python3.11/site-packages/stripe/api.py", line 311, in charge
    raise CardError(message)
stripe.error.CardError: card declined
"""


def _ids_on(html: str) -> list[int]:
    return [
        int(i) for i in re.findall(r'<th class="field-id"><a href="/admin/awa_django/job/(\d+)/change/', results(html))
    ]


def test_columns_truncation_and_estimated_counts(awa: None, admin_client: Any, monkeypatch: Any) -> None:
    long_kind = "k" * 200
    _jobs(3, "completed", kind=long_kind)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE awa.jobs SET attempted_at = now() - interval '90 seconds', finalized_at = now()")
        cursor.execute("ANALYZE awa.jobs")
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(reverse(CHANGELIST)).content.decode()
    per_row = [
        q["sql"] for q in queries.captured_queries if re.search(r'WHERE "awa"."jobs"."id" = \d+ LIMIT', q["sql"])
    ]
    assert per_row == [], per_row  # no column of the list is deferred (a query per row)
    for header in ("state", "kind", "queue", "priority", "attempt", "run at", "started", "finished", "duration", "age"):
        assert f">{header}<" in page.lower() or f">{header}</a>" in page.lower(), header
    assert 'class="awa-state awa-state-completed"' in page
    assert f'title="{long_kind}"' in page and long_kind not in results(page).replace(f'title="{long_kind}"', "")
    assert "1 min 30 s" in page  # duration, humanized
    assert "3 jobs" in page and "about" not in page
    monkeypatch.setattr(EstimatedCountPaginator, "exact_below", 1)
    assert "about 3 jobs" in admin_client.get(reverse(CHANGELIST)).content.decode()
    assert _round(25_817) == 25_800


def test_keyset_paging_reaches_the_oldest_rows_of_a_filtered_list(awa: None, admin_client: Any) -> None:
    failed = _jobs(130, "failed")
    _jobs(40, "completed")
    url = reverse(CHANGELIST)
    first = admin_client.get(url, {"state": "failed"}).content.decode()
    assert _ids_on(first) == failed[::-1][:50]
    older = re.search(r'href="([^"]+)"[^>]*data-awa-page="older"', first)
    assert older is not None
    second = admin_client.get(url + older.group(1).replace("&amp;", "&")).content.decode()
    assert _ids_on(second) == failed[::-1][50:100]
    oldest = re.search(r'href="([^"]+)"[^>]*data-awa-page="oldest"', first)
    assert oldest is not None
    with CaptureQueriesContext(connection) as queries:
        last = admin_client.get(url + oldest.group(1).replace("&amp;", "&")).content.decode()
    assert _ids_on(last) == failed[:50][::-1]
    offsets = [int(n) for q in queries.captured_queries for n in re.findall(r"OFFSET (\d+)", q["sql"])]
    assert max(offsets, default=0) < 50  # never a deep OFFSET: a range of ids
    assert 'data-awa-page="newest"' in last


def test_kind_search_by_substring_uses_the_kind_index(awa: None, admin_client: Any) -> None:
    _jobs(2, "failed", kind="billing.charge_card")
    _jobs(2, "failed", kind="billing.refund")
    _jobs(2, "failed", kind="email.send")
    page = admin_client.get(reverse(CHANGELIST), {"q": "billing"}).content.decode()
    assert "charge_card" in results(page) and "refund" in results(page) and "email.send" not in results(page)
    page = admin_client.get(reverse(CHANGELIST), {"q": "REFUND"}).content.decode()
    assert "refund" in results(page) and "charge_card" not in results(page)
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        cursor.execute("EXPLAIN SELECT id FROM awa.jobs WHERE kind IN ('billing.refund', 'billing.charge_card')")
        plan = " ".join(row[0] for row in cursor.fetchall())
    assert "jobs_kind_state_idx" in plan


def test_the_detail_shows_a_timeline_with_operators_and_user_frames_first(awa: None, admin_client: Any) -> None:
    job = _jobs(1, "failed", kind="charge")[0]
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa.jobs SET created_at = now() - interval '10 min', errors = ARRAY["
            "jsonb_build_object('attempt', 1, 'type', 'HeartbeatStale', 'error', 'no heartbeat', "
            "'at', now() - interval '2 min'),"
            "jsonb_build_object('attempt', 2, 'type', 'CardError', 'error', 'card declined', 'traceback', %s::text, "
            "'at', now() - interval '1 min')] WHERE id = %s",
            [TRACEBACK, job],
        )
    ops.retry_job(connection, job, operator="admin:ada")
    page = admin_client.get(reverse("admin:awa_django_job_change", args=[job])).content.decode()
    timeline = page.split('class="awa-timeline"', 1)[1].split("</ul>", 1)[0]
    assert (
        timeline.index("enqueued") < timeline.index("rescued") < timeline.index("CardError") < timeline.index("retry")
    )
    assert "admin:ada" in timeline
    frames = html.unescape(page.split('class="awa-user-frames">', 1)[1].split("</pre>", 1)[0])
    assert frames.startswith('  File "/srv/shop/billing/tasks.py", line 42') and "card declined" in frames
    assert "site-packages" not in frames
    assert "<summary>Full traceback</summary>" in page and "executor.py" in page
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", page) and "ago)" in page


def test_the_timeline_shows_each_attempt_with_its_worker_and_the_snooze(awa: None, admin_client: Any) -> None:
    """A real worker: snoozed once, attempt 1 failed, attempt 2 completed; each start names host/pid."""
    job = tasks.snooze_then_retry.enqueue("timeline")
    with running_worker():
        wait_for(lambda: job_state(job.id) == "completed")
    page = admin_client.get(reverse("admin:awa_django_job_change", args=[job.id])).content.decode()
    timeline = html.unescape(page.split('class="awa-timeline"', 1)[1].split("</ul>", 1)[0])
    worker = f"{socket.gethostname()}/{os.getpid()}"  # the in-process worker
    starts = [m.start() for m in re.finditer(re.escape(f"started on {worker}"), timeline)]
    assert len(starts) == 3, timeline
    snoozed = timeline.index("attempt 1 snoozed for")
    failed = timeline.index("attempt 1 failed: RetryAfter")
    assert starts[0] < snoozed < starts[1] < failed < starts[2] < timeline.index("finished: completed"), timeline
    assert timeline.count("attempt 1 started on") == 2 and timeline.count("attempt 2 started on") == 1
    assert 'class="awa-ev-snoozed"' in timeline and "the attempt is not spent" in timeline


def test_the_timeline_shows_an_attempt_handed_back_by_a_worker_shutting_down(awa: None, admin_client: Any) -> None:
    """A worker stopped while the attempt runs hands it back unspent (drain timeout); the next one finishes it."""
    tasks.RELEASE.clear()
    tasks.STARTED.clear()
    job = tasks.slow_transactional.enqueue(8)
    with running_worker(drain_timeout=0.2):
        assert tasks.STARTED.wait(10)
    assert job_state(job.id) == "available"  # released at once, not left for rescue
    tasks.RELEASE.set()
    with running_worker():
        wait_for(lambda: job_state(job.id) == "completed")
    page = admin_client.get(reverse("admin:awa_django_job_change", args=[job.id])).content.decode()
    timeline = html.unescape(page.split('class="awa-timeline"', 1)[1].split("</ul>", 1)[0])
    starts = [m.start() for m in re.finditer("attempt 1 started on", timeline)]
    handed_back = timeline.index("attempt 1 handed back: its worker shut down")
    assert len(starts) == 2 and starts[0] < handed_back < starts[1], timeline


def test_the_timeline_ends_in_the_colour_of_the_jobs_state(awa: None, admin_client: Any) -> None:
    """The entry "finished: failed" is drawn red, as the failed attempts above it; "finished: completed" green."""

    def last_entry(job_id: int) -> str:
        page = admin_client.get(reverse("admin:awa_django_job_change", args=[job_id])).content.decode()
        timeline = page.split('class="awa-timeline"', 1)[1].split("</ul>", 1)[0]
        return timeline.rsplit("<li ", 1)[1]

    failed, completed, cancelled = (_jobs(1, state)[0] for state in ("failed", "completed", "cancelled"))
    assert last_entry(failed).startswith('class="awa-ev-finished awa-ev-failed">') and "finished: failed" in (
        last_entry(failed)
    )
    assert last_entry(completed).startswith('class="awa-ev-finished awa-ev-completed">')
    assert last_entry(cancelled).startswith('class="awa-ev-finished awa-ev-cancelled">')
    head = admin_client.get(reverse("admin:awa_django_job_change", args=[failed])).content.decode()
    rule = re.search(r"li\.awa-ev-finished\.awa-ev-failed[^{]*\{\s*border-left-color: (#\w+)", head)
    error = re.search(r"li\.awa-ev-error[^{]*\{\s*border-left-color: (#\w+)", head)
    assert rule and error and rule.group(1) == error.group(1)  # the failed attempts' red
