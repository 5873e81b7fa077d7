"""The admin never answers 500 to a query string a user (or a crawler) can type."""

from __future__ import annotations

import pytest
from django.urls import reverse

import awa_django

pytestmark = [pytest.mark.django, pytest.mark.django_db(transaction=True)]

BAD_QUERIES = [
    "state=nonsense",
    "state=",
    "state=%00",
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
