"""The web app: orders whose confirmation job commits (or rolls back) with the order.

    DATABASE_URL=postgresql://user@host/db uvicorn examples.fastapi_app.app:app

``POST /orders`` writes the order, enqueues ``SendOrderConfirmation`` and
reserves stock in ONE ``AsyncSession`` transaction on the asyncpg dialect:
if the reservation fails (409), the order and its job are rolled back
together, so no worker ever sees a job for an order that does not exist.
``GET /orders/{id}`` shows the order with its job's state, read through the
mapped ``awa_sqlalchemy.Job``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel, Field, field_validator
from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

import awa_bridge
import awa_sqlalchemy
from awa_sqlalchemy import Job

from .jobs import SendOrderConfirmation
from .models import INITIAL_STOCK, Base, Order, Stock


def database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if not url:
        raise RuntimeError("set DATABASE_URL (or run `python -m examples.fastapi_app`, which can embed PostgreSQL)")
    return url


def asyncpg_url(url: str) -> URL:
    """``postgresql://...`` → the SQLAlchemy asyncpg dialect (socket directories in ``?host=`` included)."""
    return make_url(url).set(drivername="postgresql+asyncpg")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    url = database_url()
    if os.environ.get("AWA_MIGRATE_ON_STARTUP", "1") == "1":
        # Demo convenience: install the awa schema (no-op when up to date, safe
        # from several processes). A real project runs this as a deploy step,
        # or from an Alembic revision with awa_sqlalchemy.alembic.upgrade_awa.
        await asyncio.to_thread(awa_bridge.migrate, url)
    engine = create_async_engine(asyncpg_url(url), pool_size=5, max_overflow=5)
    async with engine.begin() as conn:
        # The app's tables only: awa's tables are not on Base.metadata.
        await conn.run_sync(Base.metadata.create_all)
        rows = [{"item": item, "available": n} for item, n in INITIAL_STOCK.items()]
        await conn.execute(pg_insert(Stock).values(rows).on_conflict_do_nothing())
    app.state.sessions = async_sessionmaker(engine, expire_on_commit=False)
    try:
        yield
    finally:
        await engine.dispose()


app = FastAPI(title="awa example: orders", lifespan=lifespan)


async def get_session(request: Request) -> AsyncIterator[AsyncSession]:
    async with request.app.state.sessions() as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session)]


class OrderIn(BaseModel):
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$", max_length=254)
    item: str = Field(min_length=1, max_length=100)
    quantity: int = Field(ge=1, le=100)

    @field_validator("email", "item")
    @classmethod
    def no_nul(cls, value: str) -> str:
        """PostgreSQL text cannot store NUL: refuse it here (422) rather than fail in the INSERT (500)."""
        if "\x00" in value:
            raise ValueError("contains a NUL character (\\u0000), which PostgreSQL cannot store")
        return value


class JobOut(BaseModel):
    id: int
    kind: str
    state: str
    attempt: int
    max_attempts: int
    errors: list[Any]
    finalized_at: datetime | None


class OrderOut(BaseModel):
    id: int
    email: str
    item: str
    quantity: int
    status: str
    created_at: datetime
    confirmed_at: datetime | None
    job: JobOut | None


def job_out(job: Job | awa_bridge.Job | None) -> JobOut | None:
    if job is None:
        return None
    return JobOut(
        id=job.id,
        kind=job.kind,
        state=job.state.value,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        errors=list(job.errors),
        finalized_at=job.finalized_at,
    )


def order_out(order: Order, job: Job | awa_bridge.Job | None) -> OrderOut:
    return OrderOut(
        id=order.id,
        email=order.email,
        item=order.item,
        quantity=order.quantity,
        status=order.status,
        created_at=order.created_at,
        confirmed_at=order.confirmed_at,
        job=job_out(job),
    )


@app.post("/orders", status_code=201)
async def create_order(body: OrderIn, session: SessionDep) -> OrderOut:
    async with session.begin():  # commits at the end of the block, rolls back on any exception
        order = Order(email=body.email, item=body.item, quantity=body.quantity)
        session.add(order)
        await session.flush()  # INSERT ... RETURNING: order.id exists from here on
        job = await awa_sqlalchemy.insert_job(session, SendOrderConfirmation(order_id=order.id, email=order.email))
        order.confirmation_job_id = job.id
        # Reserve stock last: the hot stock row stays locked for the shortest time.
        reserved = await session.scalar(
            update(Stock)
            .where(Stock.item == body.item, Stock.available >= body.quantity)
            .values(available=Stock.available - body.quantity)
            .returning(Stock.available)
        )
        if reserved is None:
            left = await session.scalar(select(Stock.available).where(Stock.item == body.item))
            detail = f"unknown item {body.item!r}" if left is None else f"only {left} {body.item!r} left"
            # Raising inside session.begin() rolls back the order AND its job.
            raise HTTPException(status_code=409, detail=detail)
    return order_out(order, job)


@app.get("/orders/{order_id}")
async def get_order(order_id: int, session: SessionDep) -> OrderOut:
    order = await session.get(Order, order_id)
    if order is None:
        raise HTTPException(status_code=404, detail=f"no order {order_id}")
    job = await session.get(Job, order.confirmation_job_id) if order.confirmation_job_id else None
    return order_out(order, job)


@app.get("/jobs/summary")
async def jobs_summary(session: SessionDep) -> dict[str, dict[str, int]]:
    """Jobs per kind and state: reporting with the mapped model and a plain GROUP BY."""
    rows = await session.execute(select(Job.kind, Job.state, func.count()).group_by(Job.kind, Job.state))
    summary: dict[str, dict[str, int]] = {}
    for kind, state, count in rows:
        summary.setdefault(kind, {})[state.value] = count
    return summary


@app.get("/health")
async def health(session: SessionDep) -> dict[str, bool]:
    await session.execute(select(1))
    return {"ok": True}
