"""Operator actions through SQLAlchemy sessions take part in the session's transaction."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import awa_bridge
from awa_sqlalchemy import Job, JobState, admin

from .dbutil import with_driver


def test_cancel_and_retry_commit_or_roll_back_with_the_session(db_url: str) -> None:
    engine = create_engine(with_driver(db_url, "psycopg"))
    try:
        with Session(engine) as session, session.begin():
            job = awa_bridge.insert_job_sync(session, {"n": 1}, kind="audited")
        with Session(engine) as session:
            with session.begin():
                admin.cancel_job(session, job.id)
                session.rollback()
            assert session.get(Job, job.id).state is JobState.available
        with Session(engine) as session, session.begin():
            cancelled = admin.cancel_job(session, job.id)
            assert cancelled.state is JobState.cancelled
        with Session(engine) as session:
            assert session.scalars(select(Job.state).where(Job.id == job.id)).one() is JobState.cancelled
        with Session(engine) as session, session.begin():
            admin.retry_job(session, job.id)
        with Session(engine) as session:
            stats = {s.queue: s for s in admin.queue_stats(session)}
            assert stats["default"].available == 1
            with pytest.raises(awa_bridge.InvalidState):
                admin.run_now(session, job.id)
            session.rollback()
    finally:
        engine.dispose()


async def test_async_session_operations(db_url: str) -> None:
    engine = create_async_engine(with_driver(db_url, "asyncpg"))
    try:
        async with AsyncSession(engine) as session, session.begin():
            job = await awa_bridge.insert_job(session, {"n": 2}, kind="audited")
        async with AsyncSession(engine) as session, session.begin():
            await admin.cancel_job_async(session, job.id)
        async with AsyncSession(engine) as session:
            state = (await session.execute(select(Job.state).where(Job.id == job.id))).scalar_one()
        assert state is JobState.cancelled
    finally:
        await engine.dispose()
