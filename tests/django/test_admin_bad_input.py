"""The admin never answers 500 to a query string a user (or a crawler) can type."""

from __future__ import annotations

import html
import re

import pytest
from django.urls import reverse

import awa_django
from awa_django.models import STATE_CHOICES

from .test_admin_operations import _jobs
from .test_admin_views import results

pytestmark = [pytest.mark.django, pytest.mark.django_db(transaction=True)]

BAD_QUERIES = [
    "state=nonsense",
    "state=",
    "state=%00",
    "state__exact=nonsense",  # Django's own spelling of the filter: was a database error (500)
    "state__in=failed,nonsense",
    "state__gt=nonsense",
    "queue=%00",
    "kind=%00",
    "queue=" + "q" * 5000,
    "q=%C2%B2",  # "²": a digit to str.isdigit(), not to int()
    "q=%D9%A3",  # "٣" (Arabic-Indic three)
    "q=99999999999999999999999",  # beyond bigint
    "q=-1",
    "q=%00",
    "q=args:%00",
    "q=" + "x" * 20000,
    "q=args:" + "x" * 20000,
    "o=nonsense",
    "o=99",
    "p=nonsense",
    "p=99999",
    "id=abc",
    "state=failed&queue=%00&q=%C2%B2",
]


@pytest.mark.parametrize("query", BAD_QUERIES)
def test_job_changelist_survives_a_bad_query_string(awa: None, admin_client, query: str) -> None:  # type: ignore[no-untyped-def]
    awa_django.insert_job({"to": "ada@example.com"}, kind="send_email", queue="email")
    page = admin_client.get(reverse("admin:awa_django_job_changelist") + "?" + query)
    assert page.status_code in (200, 302), page.status_code
    if page.status_code == 302:  # Django's "invalid lookup" redirect (?e=1) renders too
        assert admin_client.get(page["Location"]).status_code == 200


@pytest.mark.parametrize("query", ["q=%C2%B2", "q=%00", "q=" + "x" * 20000, "o=nonsense", "paused__exact=maybe"])
@pytest.mark.parametrize("page", ["admin:awa_django_queuemeta_changelist", "admin:awa_django_cronjob_changelist"])
def test_queue_and_cron_pages_survive_a_bad_query_string(awa: None, admin_client, page: str, query: str) -> None:  # type: ignore[no-untyped-def]
    answer = admin_client.get(reverse(page) + "?" + query)
    assert answer.status_code in (200, 302), answer.status_code


@pytest.mark.parametrize("job_id", ["abc", "99999999999999999999999", "-1", "%C2%B2"])
def test_job_detail_of_a_bad_id_is_not_a_500(awa: None, admin_client, job_id: str) -> None:  # type: ignore[no-untyped-def]
    answer = admin_client.get(f"/admin/awa_django/job/{job_id}/change/")
    assert answer.status_code in (200, 302, 404), answer.status_code


def _error_messages(page: str) -> list[str]:
    """The error messages shown above the list (Django's ``ul.messagelist``)."""
    found = re.findall(r'<li class="error">(.*?)</li>', page.split('class="messagelist"', 1)[-1], re.S)
    return [html.unescape(text).strip() for text in found] if 'class="messagelist"' in page else []


def test_an_unknown_state_in_the_url_is_named_with_the_states(awa: None, admin_client) -> None:  # type: ignore[no-untyped-def]
    """?state=bogus showed an empty list, which reads as "no jobs"; it says what is wrong instead."""
    failed = _jobs(1, "failed")
    _jobs(1, "completed")
    url = reverse("admin:awa_django_job_changelist")
    page = admin_client.get(url + "?state=bogus")
    assert page.status_code == 200  # the same URL, not Django's redirect to ?e=1 (which shows every job)
    [error] = _error_messages(page.content.decode())
    states = [value for value, _ in STATE_CHOICES]
    assert error == f"Filter state: 'bogus' is not a job state; the states are {', '.join(states)}.", error
    assert "available, running" in error and "waiting_external" in error
    assert "send_email" not in results(page.content.decode())  # nothing can match: no rows

    [misspelt] = _error_messages(admin_client.get(url + "?state=faild").content.decode())
    assert misspelt.startswith("Filter state: 'faild' is not a job state (did you mean 'failed'?)"), misspelt
    [raw] = _error_messages(admin_client.get(url + "?state__in=failed,bogus").content.decode())
    assert raw.startswith("Filter state__in: 'bogus' is not a job state"), raw

    good = admin_client.get(url + "?state=failed").content.decode()
    assert _error_messages(good) == []
    assert re.findall(r'class="field-id"><a href="/admin/awa_django/job/(\d+)/change/', results(good)) == [
        str(failed[0])
    ]
    unknown_queue = admin_client.get(url + "?queue=not-yet-used").content.decode()
    assert _error_messages(unknown_queue) == []  # queues are an open set: an empty list is the answer
