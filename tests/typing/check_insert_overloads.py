"""Checked by mypy (``mypy`` in CI, and tests/test_typing.py), never run.

The overloads of ``insert_job`` / ``insert_many`` must tell a type checker
that a sync connection gives a result and an async one an awaitable, so that
forgetting ``await`` (or adding one) is caught before it drops a job.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, assert_type

import asyncpg
import psycopg
from django.db import connection as django_connection
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

import awa_bridge
import awa_sqlalchemy
from awa_bridge import InsertManyResult, Job


def sync_forms(conn: psycopg.Connection[Any], session: Session) -> None:
    assert_type(awa_bridge.insert_job(conn, {}, kind="k"), Job)
    assert_type(awa_bridge.insert_job(session, {}, kind="k"), Job)
    assert_type(awa_bridge.insert_job(django_connection, {}, kind="k"), Job)
    assert_type(awa_bridge.insert_many(session, [{}], kind="k"), InsertManyResult)
    assert_type(awa_sqlalchemy.insert_job(session, {}, kind="k"), Job)
    assert_type(awa_bridge.insert_job_sync(conn, {}, kind="k"), Job)


async def async_forms(
    apg: asyncpg.Connection[Any], aconn: psycopg.AsyncConnection[Any], asession: AsyncSession
) -> None:
    pending = awa_bridge.insert_job(apg, {}, kind="k")
    assert_type(pending, Coroutine[Any, Any, Job])  # type: ignore[unused-coroutine]
    assert_type(await pending, Job)
    assert_type(await awa_bridge.insert_job(aconn, {}, kind="k"), Job)
    assert_type(await awa_bridge.insert_many(asession, [{}], kind="k"), InsertManyResult)
    assert_type(await awa_sqlalchemy.insert_job(asession, {}, kind="k"), Job)
