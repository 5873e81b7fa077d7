"""Mistakes a type checker must flag (tests/test_typing.py expects an error on each marked line)."""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy.ext.asyncio import AsyncSession

import awa_bridge


async def awaiting_a_sync_call(conn: psycopg.Connection[Any]) -> None:
    await awa_bridge.insert_job(conn, {}, kind="k")  # expect-error


def sync_alias_on_an_async_session(asession: AsyncSession) -> None:
    awa_bridge.insert_job_sync(asession, {}, kind="k")  # expect-error


def not_a_connection() -> None:
    awa_bridge.insert_job("postgresql://db", {}, kind="k")  # expect-error


async def forgetting_await(asession: AsyncSession) -> None:
    awa_bridge.insert_job(asession, {}, kind="k")  # expect-error
